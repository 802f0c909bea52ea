CREATE TABLE webhooks (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id INTEGER   NOT NULL REFERENCES organizations (id),
    url             TEXT      NOT NULL,
    event_types     TEXT      NOT NULL,
    secret_enc      BLOB,
    status          TEXT      NOT NULL,
    created_at      TIMESTAMP NOT NULL,
    disabled_at     TIMESTAMP,
    deleted_at      TIMESTAMP
);

CREATE INDEX webhooks_organization_idx ON webhooks (organization_id) WHERE status <> 'deleted';

CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT      NOT NULL UNIQUE,
    domain      TEXT      NOT NULL,
    event_type  TEXT      NOT NULL,
    occurred_at TIMESTAMP NOT NULL,
    message_id  TEXT      NOT NULL,
    to_email    TEXT      NOT NULL,
    subject     TEXT      NOT NULL,
    created_at  TIMESTAMP NOT NULL
);

-- Lower-case hyphenated UUIDv7 text sorts like the UUID itself.
CREATE TABLE deliveries (
    id              TEXT      PRIMARY KEY,
    organization_id INTEGER   NOT NULL REFERENCES organizations (id),
    webhook_id      INTEGER   NOT NULL REFERENCES webhooks (id),
    event_id        INTEGER   REFERENCES events (id),
    event_type      TEXT      NOT NULL,
    body            BLOB      NOT NULL,
    status          TEXT      NOT NULL,
    created_at      TIMESTAMP NOT NULL,
    finished_at     TIMESTAMP,
    UNIQUE (event_id, webhook_id)
);

CREATE INDEX deliveries_webhook_idx ON deliveries (webhook_id, id);
CREATE INDEX deliveries_pending_idx ON deliveries (webhook_id) WHERE status = 'pending';

CREATE TABLE delivery_attempts (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id        TEXT      NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempted_at       TIMESTAMP NOT NULL,
    status_code        INTEGER,
    error              TEXT,
    duration_ms        INTEGER   NOT NULL,
    response_body      BLOB,
    response_truncated BOOLEAN   NOT NULL DEFAULT FALSE
);

CREATE INDEX delivery_attempts_delivery_idx ON delivery_attempts (delivery_id, id);
