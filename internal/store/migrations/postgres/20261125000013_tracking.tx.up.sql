-- Opens, clicks and one-click unsubscribe (docs/tracking.md).

-- A domain's tracking settings, all off by default, and its custom tracking
-- domain (a subdomain; its CNAME is the domain's record 5 while it is set).
ALTER TABLE domains ADD COLUMN track_opens       BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE domains ADD COLUMN track_clicks      BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE domains ADD COLUMN track_unsubscribe BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE domains ADD COLUMN tracking_domain   TEXT;
-- The API answers for a host name from the custom domain alone (the TLS
-- listener's host policy, the click route's host check).
CREATE INDEX domains_tracking_domain_idx ON domains (tracking_domain) WHERE tracking_domain IS NOT NULL;

-- An email's tracking as it was decided when it was accepted: the request's
-- own settings over its domain's.
ALTER TABLE emails ADD COLUMN track_opens       BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE emails ADD COLUMN track_clicks      BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE emails ADD COLUMN track_unsubscribe BOOLEAN NOT NULL DEFAULT FALSE;

-- A tracked email is one message per recipient: its own signed bytes (sent
-- on every attempt, erased with the email's content), and what the
-- recipient did with it. opens counts every open; the times are the first.
ALTER TABLE email_recipients ADD COLUMN signed_message  BYTEA;
ALTER TABLE email_recipients ADD COLUMN opens           INTEGER NOT NULL DEFAULT 0;
ALTER TABLE email_recipients ADD COLUMN opened_at       TIMESTAMPTZ;
ALTER TABLE email_recipients ADD COLUMN clicked_at      TIMESTAMPTZ;
ALTER TABLE email_recipients ADD COLUMN unsubscribed_at TIMESTAMPTZ;

-- The links of a tracked email's HTML, as the customer wrote them (HTML
-- entities decoded): a click token names one by position, and the click
-- route redirects only to the URL stored here. Kept after the content is
-- erased, since clicks come for as long as the mail is read.
CREATE TABLE email_links (
    email_id UUID    NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    url      TEXT    NOT NULL,
    PRIMARY KEY (email_id, position)
);

-- An unsubscribe stops only the mail one can opt out of (docs/tracking.md).
ALTER TABLE suppressions DROP CONSTRAINT suppressions_reason_check;
ALTER TABLE suppressions ADD CONSTRAINT suppressions_reason_check
    CHECK (reason IN ('hard_bounce', 'complaint', 'unsubscribe'));

ALTER TABLE email_stats_daily ADD COLUMN unsubscribed BIGINT NOT NULL DEFAULT 0;
