-- The ACME certificate cache of the PostgreSQL migration of the same name (see
-- there).
CREATE TABLE acme_cache (
    key        TEXT      PRIMARY KEY,
    data       BLOB      NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
