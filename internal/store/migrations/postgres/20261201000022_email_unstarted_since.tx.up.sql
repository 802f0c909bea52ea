-- unstarted_since: when the API's sweep of unstarted emails (api,
-- SweepUnstartedEmails) first found the email without a workflow, by the
-- database's clock. The sweep removes an unanswered such email only once
-- that is unstartedAge past: created_at is the clock of the API host that
-- stored the email, and a sweep on a host whose clock was ahead removed an
-- email whose request was still starting it.
ALTER TABLE emails ADD COLUMN unstarted_since TIMESTAMPTZ;
