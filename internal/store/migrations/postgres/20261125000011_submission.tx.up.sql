-- SMTP submission (docs/submission.md).
-- source: how the email came in (api, batch, smtp). For smtp, content holds
-- the message as submitted (Bcc removed, Date and Message-ID added when
-- missing) instead of the API request; message_id_header is its Message-ID
-- field, the client's when it wrote one.
ALTER TABLE emails ADD COLUMN source TEXT NOT NULL DEFAULT 'api';
ALTER TABLE emails ADD COLUMN message_id_header TEXT;
