-- The emails tables of the PostgreSQL migration of the same name (see there);
-- a UUIDv7 as lower-case hyphenated text sorts like the UUID itself.
CREATE TABLE emails (
    id              TEXT        PRIMARY KEY,
    organization_id INTEGER     NOT NULL REFERENCES organizations (id),
    domain_id       INTEGER     NOT NULL REFERENCES domains (id),
    status          TEXT        NOT NULL,
    from_address    TEXT        NOT NULL,
    to_addresses    TEXT        NOT NULL,
    cc_addresses    TEXT        NOT NULL,
    subject         TEXT        NOT NULL,
    content         BLOB,
    signed_message  BLOB,
    dkim_selector   TEXT,
    -- Set when the recipients were counted as accepted in the statistics,
    -- in the same transaction, so a retried step counts them once.
    accepted_at     TIMESTAMP,
    created_at      TIMESTAMP  NOT NULL,
    sent_at         TIMESTAMP,
    erased_at       TIMESTAMP
);
CREATE INDEX emails_organization_idx ON emails (organization_id, id);
CREATE INDEX emails_domain_idx ON emails (domain_id, id);

-- One row per envelope recipient (To, Cc and Bcc), in request order.
CREATE TABLE email_recipients (
    email_id      TEXT        NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    position      INTEGER     NOT NULL,
    address       TEXT        NOT NULL,
    status        TEXT        NOT NULL,
    attempts      INTEGER     NOT NULL DEFAULT 0,
    smtp_code     INTEGER,
    last_response TEXT,
    updated_at    TIMESTAMP  NOT NULL,
    PRIMARY KEY (email_id, position)
);

-- The outcome events of an email carry its id as message_id; the delivery
-- steps find the webhook deliveries of those events through it.
CREATE INDEX events_message_idx ON events (message_id);
