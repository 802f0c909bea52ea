-- claim_token names the request that holds a key's claim: a new one with
-- every claim and takeover. The holder's writes (renew, answer, release) name
-- it, so a request whose claim was taken over (its process stalled past the
-- lock) changes nothing of the new holder's. Claims from before have none,
-- and are only ever taken over.
ALTER TABLE idempotency_keys ADD COLUMN claim_token TEXT;
