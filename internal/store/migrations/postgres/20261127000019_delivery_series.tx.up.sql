-- series counts a delivery's attempt series: every reopen (a retry, a
-- recovery) adds one, and the run of a series carries its number in its memo
-- (internal/deliveryruns). A start that finds a run open under the
-- delivery's workflow id replaces it only if it is of an older series (one
-- only finishing); one of the same series was started by a concurrent retry
-- or recovery, and is joined. Before, two retries at once could each start a
-- run, the second ending the first after it may have sent.
ALTER TABLE deliveries ADD COLUMN series BIGINT NOT NULL DEFAULT 0;
