-- See the PostgreSQL migration of the same name.
ALTER TABLE domains ADD COLUMN track_opens       BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE domains ADD COLUMN track_clicks      BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE domains ADD COLUMN track_unsubscribe BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE domains ADD COLUMN tracking_domain   TEXT;
CREATE INDEX domains_tracking_domain_idx ON domains (tracking_domain) WHERE tracking_domain IS NOT NULL;

ALTER TABLE emails ADD COLUMN track_opens       BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE emails ADD COLUMN track_clicks      BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE emails ADD COLUMN track_unsubscribe BOOLEAN NOT NULL DEFAULT FALSE;

ALTER TABLE email_recipients ADD COLUMN signed_message  BLOB;
ALTER TABLE email_recipients ADD COLUMN opens           INTEGER NOT NULL DEFAULT 0;
ALTER TABLE email_recipients ADD COLUMN opened_at       TIMESTAMP;
ALTER TABLE email_recipients ADD COLUMN clicked_at      TIMESTAMP;
ALTER TABLE email_recipients ADD COLUMN unsubscribed_at TIMESTAMP;

CREATE TABLE email_links (
    email_id TEXT    NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    url      TEXT    NOT NULL,
    PRIMARY KEY (email_id, position)
);

-- SQLite cannot change a CHECK constraint: the table is rebuilt with the
-- new reason (nothing refers to it).
CREATE TABLE suppressions_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id INTEGER   NOT NULL REFERENCES organizations (id),
    email           TEXT      NOT NULL,
    reason          TEXT      NOT NULL CHECK (reason IN ('hard_bounce', 'complaint', 'unsubscribe')),
    created_at      TIMESTAMP NOT NULL,
    UNIQUE (organization_id, email)
);
INSERT INTO suppressions_new (id, organization_id, email, reason, created_at)
    SELECT id, organization_id, email, reason, created_at FROM suppressions;
DROP TABLE suppressions;
ALTER TABLE suppressions_new RENAME TO suppressions;

ALTER TABLE email_stats_daily ADD COLUMN unsubscribed INTEGER NOT NULL DEFAULT 0;
