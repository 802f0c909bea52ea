-- See the PostgreSQL migration of the same name.
CREATE TABLE idempotency_keys (
    organization_id INTEGER   NOT NULL REFERENCES organizations (id),
    idempotency_key TEXT      NOT NULL,
    fingerprint     BLOB      NOT NULL,
    response_status INTEGER,
    response_enc    BLOB,
    locked_until    TIMESTAMP,
    created_at      TIMESTAMP NOT NULL,
    expires_at      TIMESTAMP NOT NULL,
    PRIMARY KEY (organization_id, idempotency_key)
);

CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);
