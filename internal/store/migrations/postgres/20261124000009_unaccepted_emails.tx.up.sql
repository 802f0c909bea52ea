-- answered: the client got the email's id in an answer that committed with the
-- email (a request with an Idempotency-Key), so the email is promised even if its
-- workflow did not start.
ALTER TABLE emails ADD COLUMN answered BOOLEAN NOT NULL DEFAULT false;

-- Emails no workflow has accepted yet, oldest first: the API's sweep looks for
-- ones whose workflow never started (their API process died in between).
CREATE INDEX emails_unaccepted_idx ON emails (created_at) WHERE accepted_at IS NULL;
