-- workflow_seen_at: when the inbound listener's sweep (internal/inbound,
-- SweepOnce) found or made the message's workflow. A run can exist and
-- still leave the message unhandled (an operator terminated it); a start of
-- its id changes nothing then, and without it the sweep asked about the
-- same oldest such messages every pass, and they filled its batches so that
-- a message whose workflow never started was never reached.
ALTER TABLE inbound_messages ADD COLUMN workflow_seen_at TIMESTAMPTZ;

-- The sweep's messages, oldest first (store.UnhandledInboundBefore writes
-- the same conditions).
DROP INDEX inbound_messages_unhandled_idx;
CREATE INDEX inbound_messages_unhandled_idx ON inbound_messages (received_at)
    WHERE handled_at IS NULL AND workflow_seen_at IS NULL;
