ALTER TABLE domains ADD COLUMN dkim_token      TEXT;
ALTER TABLE domains ADD COLUMN last_checked_at TIMESTAMPTZ;
ALTER TABLE domains ADD COLUMN verified_at     TIMESTAMPTZ;
ALTER TABLE domains ADD COLUMN window_started_at TIMESTAMPTZ;
UPDATE domains SET dkim_token = 'legacy' || id, window_started_at = created_at WHERE dkim_token IS NULL;
ALTER TABLE domains ALTER COLUMN dkim_token SET NOT NULL;
ALTER TABLE domains ALTER COLUMN window_started_at SET NOT NULL;
CREATE UNIQUE INDEX domains_dkim_token_idx ON domains (dkim_token);

-- The four records the customer creates, with the last verification result.
CREATE TABLE domain_records (
    domain_id  BIGINT      NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    position   SMALLINT    NOT NULL,
    purpose    TEXT        NOT NULL,
    type       TEXT        NOT NULL,
    name       TEXT        NOT NULL,
    value      TEXT        NOT NULL,
    status     TEXT        NOT NULL,
    observed   TEXT        NOT NULL DEFAULT '[]',
    error      TEXT,
    checked_at TIMESTAMPTZ,
    PRIMARY KEY (domain_id, position)
);

-- DKIM key pairs; the private key only as AES-256-GCM ciphertext.
CREATE TABLE dkim_keys (
    selector        TEXT        PRIMARY KEY,
    domain_id       BIGINT      NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    position        SMALLINT    NOT NULL,
    private_key_enc BYTEA       NOT NULL,
    public_key      TEXT        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    published_at    TIMESTAMPTZ,
    UNIQUE (domain_id, position)
);

-- TXT records of the DKIM zone as the embedded publisher serves them.
CREATE TABLE published_records (
    name       TEXT        PRIMARY KEY,
    value      TEXT        NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
