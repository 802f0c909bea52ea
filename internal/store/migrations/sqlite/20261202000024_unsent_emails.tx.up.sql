-- See the PostgreSQL migration of the same name.
CREATE INDEX emails_unerased_unsent_idx ON emails (created_at)
    WHERE erased_at IS NULL AND sent_at IS NULL;
