-- workflow_seen_at: when the API's sweep of unstarted emails (api,
-- SweepUnstartedEmails) found the email's workflow. Scheduled emails stay
-- unaccepted until their time (up to 30 days) and canceled ones for ever;
-- without it the sweep asked Temporal about the same oldest ones every
-- minute, and they filled its batches so that an email whose workflow never
-- started was never reached. Set by the sweep only, never when an email is
-- sent.
ALTER TABLE emails ADD COLUMN workflow_seen_at TIMESTAMPTZ;

-- The sweep's emails, oldest first: unaccepted, not canceled, workflow not
-- seen yet (store.UnacceptedEmailsBefore writes the same conditions).
DROP INDEX emails_unaccepted_idx;
CREATE INDEX emails_unaccepted_idx ON emails (created_at)
    WHERE accepted_at IS NULL AND workflow_seen_at IS NULL AND status <> 'canceled';
