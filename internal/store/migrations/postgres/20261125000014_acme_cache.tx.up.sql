-- Certificates for custom tracking domains (internal/trackingtls): the cache of
-- golang.org/x/crypto/acme/autocert, shared by every api process so that one
-- ACME account and one certificate per domain serve them all. key is
-- autocert's cache key (the account key's name, a domain, a domain+token for a
-- TLS-ALPN-01 challenge); data is the entry sealed with MAILYARD_ENCRYPTION_KEY
-- to secrets.Binding("acme_cache", key), since it holds private keys.
CREATE TABLE acme_cache (
    key        TEXT        PRIMARY KEY,
    data       BYTEA       NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
