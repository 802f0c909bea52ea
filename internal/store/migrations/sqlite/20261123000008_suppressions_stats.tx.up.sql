-- See the PostgreSQL migration of the same name. SQLite has no DATE type: day
-- is the text 'YYYY-MM-DD', which sorts and compares like the date.
CREATE TABLE suppressions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id INTEGER   NOT NULL REFERENCES organizations (id),
    email           TEXT      NOT NULL,
    reason          TEXT      NOT NULL CHECK (reason IN ('hard_bounce', 'complaint')),
    created_at      TIMESTAMP NOT NULL,
    UNIQUE (organization_id, email)
);

CREATE TABLE email_stats_daily (
    organization_id INTEGER NOT NULL REFERENCES organizations (id),
    domain_id       INTEGER NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    day             TEXT    NOT NULL CHECK (day GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'),
    accepted        INTEGER NOT NULL DEFAULT 0,
    delivered       INTEGER NOT NULL DEFAULT 0,
    deferred        INTEGER NOT NULL DEFAULT 0,
    bounced         INTEGER NOT NULL DEFAULT 0,
    complained      INTEGER NOT NULL DEFAULT 0,
    opened          INTEGER NOT NULL DEFAULT 0,
    clicked         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (organization_id, domain_id, day)
);

CREATE INDEX email_stats_daily_organization_day_idx ON email_stats_daily (organization_id, day);
