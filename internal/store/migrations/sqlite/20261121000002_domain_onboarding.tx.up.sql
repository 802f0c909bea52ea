-- SQLite cannot add NOT NULL columns without defaults; the API always sets them.
ALTER TABLE domains ADD COLUMN dkim_token        TEXT;
ALTER TABLE domains ADD COLUMN last_checked_at   TIMESTAMP;
ALTER TABLE domains ADD COLUMN verified_at       TIMESTAMP;
ALTER TABLE domains ADD COLUMN window_started_at TIMESTAMP;
UPDATE domains SET dkim_token = 'legacy' || id, window_started_at = created_at WHERE dkim_token IS NULL;
CREATE UNIQUE INDEX domains_dkim_token_idx ON domains (dkim_token);

CREATE TABLE domain_records (
    domain_id  INTEGER   NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    position   INTEGER   NOT NULL,
    purpose    TEXT      NOT NULL,
    type       TEXT      NOT NULL,
    name       TEXT      NOT NULL,
    value      TEXT      NOT NULL,
    status     TEXT      NOT NULL,
    observed   TEXT      NOT NULL DEFAULT '[]',
    error      TEXT,
    checked_at TIMESTAMP,
    PRIMARY KEY (domain_id, position)
);

CREATE TABLE dkim_keys (
    selector        TEXT      PRIMARY KEY,
    domain_id       INTEGER   NOT NULL REFERENCES domains (id) ON DELETE CASCADE,
    position        INTEGER   NOT NULL,
    private_key_enc BLOB      NOT NULL,
    public_key      TEXT      NOT NULL,
    created_at      TIMESTAMP NOT NULL,
    published_at    TIMESTAMP,
    UNIQUE (domain_id, position)
);

CREATE TABLE published_records (
    name       TEXT      PRIMARY KEY,
    value      TEXT      NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
