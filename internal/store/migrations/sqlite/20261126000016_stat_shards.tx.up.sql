-- See the PostgreSQL migration of the same name. SQLite cannot change a
-- primary key: the table is rebuilt with the shard in it (nothing refers to
-- it). SQLite has one writer at a time, so the shards spread nothing here,
-- but both dialects keep the one upsert.
CREATE TABLE email_stats_daily_new (
    organization_id INTEGER NOT NULL REFERENCES organizations (id),
    domain_id       INTEGER NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    day             TEXT    NOT NULL CHECK (day GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'),
    shard           INTEGER NOT NULL DEFAULT 0,
    accepted        INTEGER NOT NULL DEFAULT 0,
    delivered       INTEGER NOT NULL DEFAULT 0,
    deferred        INTEGER NOT NULL DEFAULT 0,
    bounced         INTEGER NOT NULL DEFAULT 0,
    complained      INTEGER NOT NULL DEFAULT 0,
    opened          INTEGER NOT NULL DEFAULT 0,
    clicked         INTEGER NOT NULL DEFAULT 0,
    unsubscribed    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (organization_id, domain_id, day, shard)
);
INSERT INTO email_stats_daily_new (organization_id, domain_id, day, accepted, delivered, deferred, bounced, complained, opened, clicked, unsubscribed)
    SELECT organization_id, domain_id, day, accepted, delivered, deferred, bounced, complained, opened, clicked, unsubscribed FROM email_stats_daily;
DROP TABLE email_stats_daily;
ALTER TABLE email_stats_daily_new RENAME TO email_stats_daily;
CREATE INDEX email_stats_daily_organization_day_idx ON email_stats_daily (organization_id, day);
