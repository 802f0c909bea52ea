-- Emails sent through the API. The id is a UUIDv7 (time-ordered, so the
-- newest-first list pages by id) and is also the Message-ID's local part and
-- the workflow's business key ("email-delivery:<id>").
--
-- content is the validated request (bodies, attachments, Bcc and Reply-To) as
-- JSON; signed_message the DKIM-signed RFC 5322 bytes the first delivery step
-- built from it, which every attempt sends unchanged. Both are erased
-- (set to NULL, erased_at set) MAILYARD_EMAIL_RETENTION after the email is
-- sent; the envelope columns stay for the email's log.
CREATE TABLE emails (
    id              UUID        PRIMARY KEY,
    organization_id BIGINT      NOT NULL REFERENCES organizations (id),
    domain_id       BIGINT      NOT NULL REFERENCES domains (id),
    status          TEXT        NOT NULL,
    from_address    TEXT        NOT NULL,
    to_addresses    TEXT        NOT NULL,
    cc_addresses    TEXT        NOT NULL,
    subject         TEXT        NOT NULL,
    content         BYTEA,
    signed_message  BYTEA,
    dkim_selector   TEXT,
    -- Set when the recipients were counted as accepted in the statistics,
    -- in the same transaction, so a retried step counts them once.
    accepted_at     TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    sent_at         TIMESTAMPTZ,
    erased_at       TIMESTAMPTZ
);
CREATE INDEX emails_organization_idx ON emails (organization_id, id);
CREATE INDEX emails_domain_idx ON emails (domain_id, id);

-- One row per envelope recipient (To, Cc and Bcc), in request order.
CREATE TABLE email_recipients (
    email_id      UUID        NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    position      INTEGER     NOT NULL,
    address       TEXT        NOT NULL,
    status        TEXT        NOT NULL,
    attempts      INTEGER     NOT NULL DEFAULT 0,
    smtp_code     INTEGER,
    last_response TEXT,
    updated_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (email_id, position)
);

-- The outcome events of an email carry its id as message_id; the delivery
-- steps find the webhook deliveries of those events through it.
CREATE INDEX events_message_idx ON events (message_id);
