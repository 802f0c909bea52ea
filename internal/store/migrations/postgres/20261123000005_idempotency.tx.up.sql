-- Idempotency keys of POST requests, per organization, kept 24 hours. A row is
-- claimed (response_status NULL, locked_until set) before the operation runs and
-- holds the answer afterwards. response_enc is the answer (headers and body)
-- sealed with AES-256-GCM and bound to the row: answers can hold secrets (a new
-- API key, a signing secret). fingerprint is SHA-256 of method, path and body.
CREATE TABLE idempotency_keys (
    organization_id BIGINT      NOT NULL REFERENCES organizations (id),
    idempotency_key TEXT        NOT NULL,
    fingerprint     BYTEA       NOT NULL,
    response_status INTEGER,
    response_enc    BYTEA,
    locked_until    TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    expires_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (organization_id, idempotency_key)
);

CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);
