CREATE TABLE organizations (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT      NOT NULL,
    created_at TIMESTAMP NOT NULL
);

CREATE TABLE domains (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id    INTEGER   NOT NULL REFERENCES organizations (id),
    domain             TEXT      NOT NULL,
    mailfrom_subdomain TEXT      NOT NULL,
    status             TEXT      NOT NULL,
    created_at         TIMESTAMP NOT NULL,
    UNIQUE (organization_id, domain)
);

CREATE TABLE api_keys (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id   INTEGER   NOT NULL REFERENCES organizations (id),
    sending_domain_id INTEGER   REFERENCES domains (id),
    label             TEXT      NOT NULL,
    username          TEXT      NOT NULL,
    prefix            TEXT      NOT NULL,
    digest            BLOB      NOT NULL UNIQUE,
    permissions       TEXT      NOT NULL,
    status            TEXT      NOT NULL,
    last_used_at      TIMESTAMP,
    created_at        TIMESTAMP NOT NULL,
    revoked_at        TIMESTAMP
);

CREATE INDEX api_keys_organization_idx ON api_keys (organization_id) WHERE status = 'active';
