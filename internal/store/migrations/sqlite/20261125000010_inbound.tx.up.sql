-- The inbound tables and columns of the PostgreSQL migration of the same name
-- (see there).
ALTER TABLE emails ADD COLUMN envelope_sender TEXT;
UPDATE emails SET envelope_sender = 'bounces+' || id || '@' ||
    (SELECT mailfrom_subdomain FROM domains WHERE domains.id = emails.domain_id);

ALTER TABLE events ADD COLUMN body BLOB;

CREATE TABLE inbound_messages (
    id              TEXT        PRIMARY KEY,
    received_at     TIMESTAMP   NOT NULL,
    mail_from       TEXT        NOT NULL,
    recipients      TEXT        NOT NULL,
    email_id        TEXT,
    organization_id INTEGER,
    domain_id       INTEGER,
    size            INTEGER     NOT NULL,
    raw             BLOB,
    kind            TEXT,
    handled_at      TIMESTAMP,
    erased_at       TIMESTAMP
);
CREATE INDEX inbound_messages_unhandled_idx ON inbound_messages (received_at) WHERE handled_at IS NULL;
