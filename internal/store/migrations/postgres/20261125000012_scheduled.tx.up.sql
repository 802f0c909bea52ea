-- Scheduled sending (docs/sending.md, "Scheduled and batch sending"): the
-- time a scheduled email is sent at. Such an email is 'scheduled' until its
-- workflow's timer fires, or 'canceled' if it was canceled before.
ALTER TABLE emails ADD COLUMN scheduled_at TIMESTAMPTZ;
