-- See the PostgreSQL migration of the same name.
CREATE INDEX deliveries_failed_id_idx ON deliveries (webhook_id, id) WHERE status = 'failed';
