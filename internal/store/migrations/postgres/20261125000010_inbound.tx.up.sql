-- Inbound mail at the bounce host (docs/inbound.md).

-- The envelope sender (MAIL FROM) each email is sent with:
-- bounces+<email_id>.<tag>@<mailfrom subdomain>, set by the first delivery
-- step. The inbound listener accepts RCPT TO only for a stored one. Emails
-- that existed before tags keep the untagged form they were sent with.
ALTER TABLE emails ADD COLUMN envelope_sender TEXT;
UPDATE emails SET envelope_sender = 'bounces+' || emails.id::text || '@' || domains.mailfrom_subdomain
FROM domains WHERE domains.id = emails.domain_id;

-- The whole delivery body of an event (its envelope with data), so
-- GET /api/v1/emails/{id}/events shows each event's data whether or not a
-- webhook received it. Events stored before this column show the fields of
-- their row.
ALTER TABLE events ADD COLUMN body BYTEA;

-- One row per message received at the bounce host. raw is the message as it
-- arrived (personal data: erased MAILYARD_EMAIL_RETENTION after it was
-- handled); recipients the accepted RCPT TO addresses as a JSON array;
-- email_id the email whose envelope sender received it (organization_id and
-- domain_id are that email's), if any. kind is set when the message has been
-- handled (dsn, arf, arf_other, auto_reply, legacy_bounce, unsubscribe,
-- unrecognized).
CREATE TABLE inbound_messages (
    id              UUID        PRIMARY KEY,
    received_at     TIMESTAMPTZ NOT NULL,
    mail_from       TEXT        NOT NULL,
    recipients      TEXT        NOT NULL,
    email_id        UUID,
    organization_id BIGINT,
    domain_id       BIGINT,
    size            INTEGER     NOT NULL,
    raw             BYTEA,
    kind            TEXT,
    handled_at      TIMESTAMPTZ,
    erased_at       TIMESTAMPTZ
);
-- The inbound sweep starts the workflows of messages that are not handled yet.
CREATE INDEX inbound_messages_unhandled_idx ON inbound_messages (received_at) WHERE handled_at IS NULL;
