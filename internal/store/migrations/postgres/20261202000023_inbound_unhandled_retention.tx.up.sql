-- The retention sweep also erases inbound messages that were never handled
-- (their run was terminated, or failed for good), received longer ago than
-- MAILYARD_EMAIL_RETENTION (docs/inbound.md, "Retention"). This index holds
-- only those still to be erased, oldest first, as
-- inbound_messages_unerased_handled_idx does for handled ones.
CREATE INDEX inbound_messages_unerased_unhandled_idx ON inbound_messages (received_at)
    WHERE erased_at IS NULL AND handled_at IS NULL;
