-- See the PostgreSQL migration of the same name.
ALTER TABLE deliveries ADD COLUMN series INTEGER NOT NULL DEFAULT 0;
