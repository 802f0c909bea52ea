-- Suppressions and sending statistics (docs/suppressions-and-stats.md).

-- The organization's suppression list: recipients it no longer sends to after
-- a hard bounce or a complaint. email is stored lower-cased entirely, so one
-- address has one row whatever the case it arrived in. The id orders the list
-- (oldest first) and keys its pages.
CREATE TABLE suppressions (
    id              BIGSERIAL PRIMARY KEY,
    organization_id BIGINT      NOT NULL REFERENCES organizations (id),
    email           TEXT        NOT NULL,
    reason          TEXT        NOT NULL CHECK (reason IN ('hard_bounce', 'complaint')),
    created_at      TIMESTAMPTZ NOT NULL,
    UNIQUE (organization_id, email)
);

-- The daily rollup that GET /api/v1/stats reads: one row per organization,
-- sending domain and UTC day, incremented (upsert) in the transaction that
-- records each event, so a read never scans the events. A domain row removed
-- outright (an add undone before onboarding started) never sent anything; its
-- rows go with it.
CREATE TABLE email_stats_daily (
    organization_id BIGINT NOT NULL REFERENCES organizations (id),
    domain_id       BIGINT NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    day             DATE   NOT NULL,
    accepted        BIGINT NOT NULL DEFAULT 0,
    delivered       BIGINT NOT NULL DEFAULT 0,
    deferred        BIGINT NOT NULL DEFAULT 0,
    bounced         BIGINT NOT NULL DEFAULT 0,
    complained      BIGINT NOT NULL DEFAULT 0,
    opened          BIGINT NOT NULL DEFAULT 0,
    clicked         BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (organization_id, domain_id, day)
);

-- Organization-wide reads (no domain_id) walk the days of the range only.
CREATE INDEX email_stats_daily_organization_day_idx ON email_stats_daily (organization_id, day);
