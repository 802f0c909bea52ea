-- The retention sweep erases the content of emails never sent whose run has
-- ended (an operator terminated it), once they are far older than any email
-- still on its way (docs/sending.md, "Retention"). This index holds only
-- the emails not sent and not erased, oldest first: those on their way,
-- and those abandoned.
CREATE INDEX emails_unerased_unsent_idx ON emails (created_at)
    WHERE erased_at IS NULL AND sent_at IS NULL;
