CREATE TABLE platform_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_key       TEXT      NOT NULL UNIQUE,
    organization_id INTEGER   NOT NULL REFERENCES organizations (id),
    event_type      TEXT      NOT NULL,
    occurred_at     TIMESTAMP NOT NULL,
    created_at      TIMESTAMP NOT NULL
);

ALTER TABLE deliveries ADD COLUMN platform_event_id INTEGER REFERENCES platform_events (id);
CREATE UNIQUE INDEX deliveries_platform_event_idx ON deliveries (platform_event_id, webhook_id);

-- SQLite cannot add a NOT NULL column without a default; the store always
-- writes healthy_at.
ALTER TABLE webhooks ADD COLUMN disabled_reason TEXT;
ALTER TABLE webhooks ADD COLUMN disable_count   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN healthy_at      TIMESTAMP;
UPDATE webhooks SET healthy_at = created_at;
-- Before this release only a 410 disabled a webhook. Its count stays 0: that
-- disable is never announced as webhook.disabled.
UPDATE webhooks SET disabled_reason = 'receiver_gone' WHERE status = 'disabled';

CREATE TABLE webhook_previous_secrets (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id  INTEGER   NOT NULL REFERENCES webhooks (id),
    secret_enc  BLOB,
    replaced_at TIMESTAMP NOT NULL,
    expires_at  TIMESTAMP NOT NULL
);
CREATE INDEX webhook_previous_secrets_webhook_idx ON webhook_previous_secrets (webhook_id, expires_at);
CREATE INDEX webhook_previous_secrets_expiry_idx ON webhook_previous_secrets (expires_at);

ALTER TABLE deliveries ADD COLUMN recovery_id TEXT;
CREATE INDEX deliveries_failed_idx ON deliveries (webhook_id, created_at) WHERE status = 'failed';
