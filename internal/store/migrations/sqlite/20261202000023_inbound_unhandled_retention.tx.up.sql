-- See the PostgreSQL migration of the same name.
CREATE INDEX inbound_messages_unerased_unhandled_idx ON inbound_messages (received_at)
    WHERE erased_at IS NULL AND handled_at IS NULL;
