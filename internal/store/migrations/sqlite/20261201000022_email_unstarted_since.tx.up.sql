-- See the PostgreSQL migration of the same name.
ALTER TABLE emails ADD COLUMN unstarted_since TIMESTAMP;
