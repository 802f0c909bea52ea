-- Domain lifecycle: deletion and DKIM rotation (docs: README "Domain lifecycle").
-- SQLite cannot drop a constraint, so domains and dkim_keys are rebuilt (the
-- documented twelve-step procedure): foreign keys off outside the transaction,
-- so dropping the old tables does not cascade into the tables that point at them.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

CREATE TABLE domains_new (
    id                          INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id             INTEGER   NOT NULL REFERENCES organizations (id),
    domain                      TEXT      NOT NULL,
    mailfrom_subdomain          TEXT      NOT NULL,
    status                      TEXT      NOT NULL,
    created_at                  TIMESTAMP NOT NULL,
    dkim_token                  TEXT,
    last_checked_at             TIMESTAMP,
    verified_at                 TIMESTAMP,
    window_started_at           TIMESTAMP,
    deleted_at                  TIMESTAMP,
    dkim_rotation_enabled       BOOLEAN   NOT NULL DEFAULT TRUE,
    dkim_rotation_interval_days INTEGER   NOT NULL DEFAULT 180,
    dkim_last_rotated_at        TIMESTAMP,
    dkim_rotation_status        TEXT
);
INSERT INTO domains_new (id, organization_id, domain, mailfrom_subdomain, status, created_at,
                         dkim_token, last_checked_at, verified_at, window_started_at)
SELECT id, organization_id, domain, mailfrom_subdomain, status, created_at,
       dkim_token, last_checked_at, verified_at, window_started_at FROM domains;
DROP TABLE domains;
ALTER TABLE domains_new RENAME TO domains;
CREATE UNIQUE INDEX domains_dkim_token_idx ON domains (dkim_token);
CREATE UNIQUE INDEX domains_organization_domain_idx ON domains (organization_id, domain) WHERE deleted_at IS NULL;

CREATE TABLE dkim_keys_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    selector        TEXT      NOT NULL,
    domain_id       INTEGER   NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    position        INTEGER   NOT NULL,
    generation      INTEGER   NOT NULL,
    state           TEXT      NOT NULL,
    bits            INTEGER   NOT NULL DEFAULT 2048,
    private_key_enc BLOB,
    public_key      TEXT      NOT NULL,
    created_at      TIMESTAMP NOT NULL,
    published_at    TIMESTAMP,
    retired_at      TIMESTAMP
);
INSERT INTO dkim_keys_new (selector, domain_id, position, generation, state, private_key_enc, public_key, created_at, published_at)
SELECT selector, domain_id, position, 1,
       CASE WHEN published_at IS NULL THEN 'publishing' WHEN position = 1 THEN 'active' ELSE 'standby' END,
       private_key_enc, public_key, created_at, published_at
FROM dkim_keys ORDER BY domain_id, position;
DROP TABLE dkim_keys;
ALTER TABLE dkim_keys_new RENAME TO dkim_keys;
CREATE UNIQUE INDEX dkim_keys_selector_generation_idx ON dkim_keys (selector, generation);
CREATE UNIQUE INDEX dkim_keys_current_idx ON dkim_keys (selector) WHERE state IN ('active', 'standby');
CREATE INDEX dkim_keys_domain_idx ON dkim_keys (domain_id);

COMMIT;
PRAGMA foreign_keys = ON;
