-- See the PostgreSQL migration of the same name.
ALTER TABLE emails ADD COLUMN workflow_seen_at TIMESTAMP;

DROP INDEX emails_unaccepted_idx;
CREATE INDEX emails_unaccepted_idx ON emails (created_at)
    WHERE accepted_at IS NULL AND workflow_seen_at IS NULL AND status <> 'canceled';
