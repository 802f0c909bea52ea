-- The columns of the PostgreSQL migration of the same name (see there).
ALTER TABLE emails ADD COLUMN source TEXT NOT NULL DEFAULT 'api';
ALTER TABLE emails ADD COLUMN message_id_header TEXT;
