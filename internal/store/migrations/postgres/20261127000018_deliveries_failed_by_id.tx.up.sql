-- A recovery pages through a webhook's failed deliveries by id
-- (store.FailedDeliveryIDs). deliveries_failed_idx is in created_at order,
-- so every page sorted the whole window, and pages after the first walked
-- deliveries_webhook_idx through all of the webhook's deliveries, delivered
-- and pending ones included. This one walks the failed ones in id order.
CREATE INDEX deliveries_failed_id_idx ON deliveries (webhook_id, id) WHERE status = 'failed';
