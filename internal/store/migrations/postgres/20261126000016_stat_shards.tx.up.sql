-- Every email adds to its domain's counters of the day twice (accepted, then
-- delivered or bounced), each in the transaction that records what it
-- counts, so one row per (organization, domain, day) was a hot row: every
-- concurrent transaction of a busy domain waited on its lock until the one
-- before had committed. Each increment now goes to one of 16 shard rows,
-- chosen at random, and reads add the shards up (internal/store/stats.go).
ALTER TABLE email_stats_daily ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE email_stats_daily DROP CONSTRAINT email_stats_daily_pkey;
ALTER TABLE email_stats_daily ADD PRIMARY KEY (organization_id, domain_id, day, shard);
