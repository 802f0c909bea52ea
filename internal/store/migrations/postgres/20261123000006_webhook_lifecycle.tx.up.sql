-- Platform events (domain.*, webhook.disabled): Mailyard's own events, one
-- organization each, no personal data. They live beside the email events
-- rather than in them because their shape differs (no domain, recipient or
-- subject) and SQLite cannot relax NOT NULL columns without rebuilding the
-- table. event_key makes emission idempotent (e.g. "domain.verified:42:1").
CREATE TABLE platform_events (
    id              BIGSERIAL PRIMARY KEY,
    event_key       TEXT        NOT NULL UNIQUE,
    organization_id BIGINT      NOT NULL REFERENCES organizations (id),
    event_type      TEXT        NOT NULL,
    occurred_at     TIMESTAMPTZ NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL
);

ALTER TABLE deliveries ADD COLUMN platform_event_id BIGINT REFERENCES platform_events (id);
CREATE UNIQUE INDEX deliveries_platform_event_idx ON deliveries (platform_event_id, webhook_id);

-- Webhook lifecycle: why and how often a webhook was disabled (the count keys
-- the webhook.disabled event of each disable), and the start of the failure
-- clock (creation, re-enabling or the last 2xx answer).
ALTER TABLE webhooks ADD COLUMN disabled_reason TEXT;
ALTER TABLE webhooks ADD COLUMN disable_count   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN healthy_at      TIMESTAMPTZ;
UPDATE webhooks SET healthy_at = created_at;
-- Before this release only a 410 disabled a webhook. Its count stays 0: that
-- disable is never announced as webhook.disabled.
UPDATE webhooks SET disabled_reason = 'receiver_gone' WHERE status = 'disabled';
ALTER TABLE webhooks ALTER COLUMN healthy_at SET NOT NULL;

-- Signing secrets replaced by a rotation, still valid until expires_at.
-- AES-256-GCM ciphertext bound to the row ("webhook_previous_secrets:<id>");
-- rows are deleted once expired.
CREATE TABLE webhook_previous_secrets (
    id          BIGSERIAL PRIMARY KEY,
    webhook_id  BIGINT      NOT NULL REFERENCES webhooks (id),
    secret_enc  BYTEA,
    replaced_at TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX webhook_previous_secrets_webhook_idx ON webhook_previous_secrets (webhook_id, expires_at);
CREATE INDEX webhook_previous_secrets_expiry_idx ON webhook_previous_secrets (expires_at);

-- Recovery: the recovery that last reopened a delivery, so a resumed
-- recovery redelivers each delivery once.
ALTER TABLE deliveries ADD COLUMN recovery_id TEXT;
CREATE INDEX deliveries_failed_idx ON deliveries (webhook_id, created_at) WHERE status = 'failed';
