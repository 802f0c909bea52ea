-- Domain lifecycle: deletion and DKIM rotation (docs: README "Domain lifecycle").

-- A deleted domain keeps its row (its deletion workflow and history need it) but
-- leaves every list, and its name can be added again at once.
ALTER TABLE domains ADD COLUMN deleted_at TIMESTAMPTZ;
ALTER TABLE domains DROP CONSTRAINT domains_organization_id_domain_key;
CREATE UNIQUE INDEX domains_organization_domain_idx ON domains (organization_id, domain) WHERE deleted_at IS NULL;

-- Rotation settings and the state of the current (or last) rotation.
ALTER TABLE domains ADD COLUMN dkim_rotation_enabled       BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE domains ADD COLUMN dkim_rotation_interval_days INTEGER NOT NULL DEFAULT 180;
ALTER TABLE domains ADD COLUMN dkim_last_rotated_at        TIMESTAMPTZ;
ALTER TABLE domains ADD COLUMN dkim_rotation_status        TEXT;

-- A selector now holds a sequence of keys (generations): rotation replaces the
-- key behind a selector. Each row has its own id; the private key is sealed to
-- (selector, generation), so a ciphertext copied to another row does not open.
ALTER TABLE dkim_keys DROP CONSTRAINT dkim_keys_pkey;
ALTER TABLE dkim_keys DROP CONSTRAINT dkim_keys_domain_id_position_key;
ALTER TABLE dkim_keys ADD COLUMN id BIGSERIAL PRIMARY KEY;
ALTER TABLE dkim_keys ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;
ALTER TABLE dkim_keys ADD COLUMN state      TEXT    NOT NULL DEFAULT 'publishing';
ALTER TABLE dkim_keys ADD COLUMN bits       INTEGER NOT NULL DEFAULT 2048;
ALTER TABLE dkim_keys ADD COLUMN retired_at TIMESTAMPTZ;
ALTER TABLE dkim_keys ALTER COLUMN private_key_enc DROP NOT NULL;
UPDATE dkim_keys SET state = CASE WHEN position = 1 THEN 'active' ELSE 'standby' END WHERE published_at IS NOT NULL;
ALTER TABLE dkim_keys ALTER COLUMN generation DROP DEFAULT;
ALTER TABLE dkim_keys ALTER COLUMN state DROP DEFAULT;
CREATE UNIQUE INDEX dkim_keys_selector_generation_idx ON dkim_keys (selector, generation);
-- At most one published key per selector signs or stands by; a replacement
-- is "publishing" beside the standby key it replaces.
CREATE UNIQUE INDEX dkim_keys_current_idx ON dkim_keys (selector) WHERE state IN ('active', 'standby');
CREATE INDEX dkim_keys_domain_idx ON dkim_keys (domain_id);
