-- See the PostgreSQL migration of the same name.
ALTER TABLE inbound_messages ADD COLUMN workflow_seen_at TIMESTAMP;

DROP INDEX inbound_messages_unhandled_idx;
CREATE INDEX inbound_messages_unhandled_idx ON inbound_messages (received_at)
    WHERE handled_at IS NULL AND workflow_seen_at IS NULL;
