-- Webhook subscriptions. The signing secret is AES-256-GCM ciphertext bound to
-- the row ("webhooks:<id>"). Deleted webhooks stay as rows (status 'deleted') so
-- their deliveries keep their history; they are never shown again.
CREATE TABLE webhooks (
    id              BIGSERIAL PRIMARY KEY,
    organization_id BIGINT      NOT NULL REFERENCES organizations (id),
    url             TEXT        NOT NULL,
    event_types     TEXT        NOT NULL,
    secret_enc      BYTEA,
    status          TEXT        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    disabled_at     TIMESTAMPTZ,
    deleted_at      TIMESTAMPTZ
);

CREATE INDEX webhooks_organization_idx ON webhooks (organization_id) WHERE status <> 'deleted';

-- Email events from the sending pipeline; event_id makes ingest idempotent.
CREATE TABLE events (
    id          BIGSERIAL PRIMARY KEY,
    event_id    TEXT        NOT NULL UNIQUE,
    domain      TEXT        NOT NULL,
    event_type  TEXT        NOT NULL,
    occurred_at TIMESTAMPTZ NOT NULL,
    message_id  TEXT        NOT NULL,
    to_email    TEXT        NOT NULL,
    subject     TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);

-- One event on its way to one webhook. The id is a UUIDv7 (time-ordered, so the
-- newest-first list pages by id). body holds the exact bytes every attempt sends.
CREATE TABLE deliveries (
    id              UUID        PRIMARY KEY,
    organization_id BIGINT      NOT NULL REFERENCES organizations (id),
    webhook_id      BIGINT      NOT NULL REFERENCES webhooks (id),
    event_id        BIGINT      REFERENCES events (id),
    event_type      TEXT        NOT NULL,
    body            BYTEA       NOT NULL,
    status          TEXT        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    finished_at     TIMESTAMPTZ,
    UNIQUE (event_id, webhook_id)
);

CREATE INDEX deliveries_webhook_idx ON deliveries (webhook_id, id);
CREATE INDEX deliveries_pending_idx ON deliveries (webhook_id) WHERE status = 'pending';

-- Every attempt as the customer sees it in the delivery log.
CREATE TABLE delivery_attempts (
    id                 BIGSERIAL PRIMARY KEY,
    delivery_id        UUID        NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempted_at       TIMESTAMPTZ NOT NULL,
    status_code        INTEGER,
    error              TEXT,
    duration_ms        BIGINT      NOT NULL,
    response_body      BYTEA,
    response_truncated BOOLEAN     NOT NULL DEFAULT FALSE
);

CREATE INDEX delivery_attempts_delivery_idx ON delivery_attempts (delivery_id, id);
