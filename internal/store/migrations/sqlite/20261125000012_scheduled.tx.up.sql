-- The column of the PostgreSQL migration of the same name (see there).
ALTER TABLE emails ADD COLUMN scheduled_at TIMESTAMP;
