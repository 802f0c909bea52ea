-- The retention sweep erases what MAILYARD_EMAIL_RETENTION allows to keep
-- no longer: the content of emails sent before a cutoff, the bytes and
-- addresses of inbound messages handled before one (docs/sending.md,
-- "Retention"). These indexes hold only the rows still to be erased, oldest
-- first, so a pass reads no more than it erases.
CREATE INDEX emails_unerased_sent_idx ON emails (sent_at)
    WHERE erased_at IS NULL AND sent_at IS NOT NULL;
CREATE INDEX inbound_messages_unerased_handled_idx ON inbound_messages (handled_at)
    WHERE erased_at IS NULL AND handled_at IS NOT NULL;
