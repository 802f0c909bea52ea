CREATE TABLE organizations (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE domains (
    id                 BIGSERIAL PRIMARY KEY,
    organization_id    BIGINT      NOT NULL REFERENCES organizations (id),
    domain             TEXT        NOT NULL,
    mailfrom_subdomain TEXT        NOT NULL,
    status             TEXT        NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL,
    UNIQUE (organization_id, domain)
);

CREATE TABLE api_keys (
    id                BIGSERIAL PRIMARY KEY,
    organization_id   BIGINT      NOT NULL REFERENCES organizations (id),
    sending_domain_id BIGINT      REFERENCES domains (id),
    label             TEXT        NOT NULL,
    username          TEXT        NOT NULL,
    prefix            TEXT        NOT NULL,
    digest            BYTEA       NOT NULL UNIQUE,
    permissions       TEXT        NOT NULL,
    status            TEXT        NOT NULL,
    last_used_at      TIMESTAMPTZ,
    created_at        TIMESTAMPTZ NOT NULL,
    revoked_at        TIMESTAMPTZ
);

CREATE INDEX api_keys_organization_idx ON api_keys (organization_id) WHERE status = 'active';
