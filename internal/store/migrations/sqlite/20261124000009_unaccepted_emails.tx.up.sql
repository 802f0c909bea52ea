-- Emails no workflow has accepted yet, oldest first: the API's sweep looks for
-- ones whose workflow never started (their API process died in between).
CREATE INDEX emails_unaccepted_idx ON emails (created_at) WHERE accepted_at IS NULL;
