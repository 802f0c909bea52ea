package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/secrets"
)

// IdempotencyKey is a POST's Idempotency-Key: claimed while its first request
// runs, then holding that request's answer until it expires.
type IdempotencyKey struct {
	bun.BaseModel `bun:"table:idempotency_keys"`

	OrganizationID int64  `bun:"organization_id,pk"`
	Key            string `bun:"idempotency_key,pk"`
	// Fingerprint is what the first request was (SHA-256 of method, path and
	// body); another request with the key is refused.
	Fingerprint []byte `bun:"fingerprint,notnull"`
	// ResponseStatus is nil while the first request is being answered,
	// unless its operation stored its answer with it (see LockedUntil).
	ResponseStatus *int `bun:"response_status"`
	// ResponseEnc is the sealed answer (IdempotencyBinding).
	ResponseEnc []byte `bun:"response_enc"`
	// LockedUntil ends a claim whose process died before answering. An
	// answer stored with its operation (SaveIdempotentResponseIn) keeps the
	// lock until the request ends, since the request may still undo the
	// operation and its answer.
	LockedUntil *time.Time `bun:"locked_until"`
	// ClaimToken names the request holding the claim (IdempotencyClaim).
	ClaimToken string    `bun:"claim_token,nullzero"`
	CreatedAt  time.Time `bun:"created_at,notnull"`
	ExpiresAt  time.Time `bun:"expires_at,notnull"`
}

// Answered says whether the key holds an answer that is final at: one its
// request saved when it ended, or one stored with its operation whose
// request has ended or whose process died (the lock ran out).
func (k *IdempotencyKey) Answered(at time.Time) bool {
	return k.ResponseStatus != nil && (k.LockedUntil == nil || !k.LockedUntil.After(at))
}

// IdempotencyBinding names the row a stored answer is sealed to, so it opens
// only for the organization and key it was stored under.
func IdempotencyBinding(orgID int64, key string) []byte {
	return secrets.Binding("idempotency_keys", fmt.Sprintf("%d/%s", orgID, key))
}

// IdempotencyClaim is one request's hold on a key. Every write the request
// makes to the key names its token, so a request whose claim was taken over
// (its process stalled past the lock, and a retry claimed the key) can no
// longer renew, answer or release the claim of the request that holds it now.
type IdempotencyClaim struct {
	OrganizationID int64
	Key            string
	Token          string
}

// held limits q to the row of the key while c holds it.
func (c IdempotencyClaim) held(q bun.QueryBuilder) bun.QueryBuilder {
	return q.Where("organization_id = ?", c.OrganizationID).Where("idempotency_key = ?", c.Key).Where("claim_token = ?", c.Token)
}

// ClaimIdempotencyKey makes the caller the one request that answers key, or
// returns the key's row as another request left it. A nil row means claimed:
// the caller runs the operation, then calls SaveIdempotentResponse or
// ReleaseIdempotencyKey with the claim. The claim is an INSERT ... ON CONFLICT DO NOTHING, so
// of any number of concurrent requests, on any number of processes, exactly
// one wins. An expired row, and a claim whose lock ran out with the same
// fingerprint (its process died), are taken over.
func (s *Store) ClaimIdempotencyKey(ctx context.Context, orgID int64, key string, fingerprint []byte, lockFor, retain time.Duration) (IdempotencyClaim, *IdempotencyKey, error) {
	claim := IdempotencyClaim{OrganizationID: orgID, Key: key, Token: uuid.NewString()}
	for range 5 {
		at := now()
		lockedUntil := at.Add(lockFor)
		row := &IdempotencyKey{OrganizationID: orgID, Key: key, Fingerprint: fingerprint, LockedUntil: &lockedUntil, ClaimToken: claim.Token, CreatedAt: at, ExpiresAt: at.Add(retain)}
		res, err := s.DB.NewInsert().Model(row).On("CONFLICT (organization_id, idempotency_key) DO NOTHING").Exec(ctx)
		if err != nil {
			return IdempotencyClaim{}, nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return IdempotencyClaim{}, nil, err
		} else if n == 1 {
			return claim, nil, nil
		}
		existing, err := s.IdempotencyKey(ctx, orgID, key)
		if errors.Is(err, ErrNotFound) {
			continue // released or swept meanwhile: claim again
		}
		if err != nil {
			return IdempotencyClaim{}, nil, err
		}
		switch {
		case !existing.ExpiresAt.After(at):
			// Expired but not swept yet: it no longer counts.
			if _, err := s.DB.NewDelete().Model((*IdempotencyKey)(nil)).
				Where("organization_id = ?", orgID).Where("idempotency_key = ?", key).
				Where("expires_at <= ?", at).Exec(ctx); err != nil {
				return IdempotencyClaim{}, nil, err
			}
			continue
		case existing.ResponseStatus == nil && existing.LockedUntil != nil && !existing.LockedUntil.After(at) && bytes.Equal(existing.Fingerprint, fingerprint):
			// The guard makes one of several requests that see the dead claim
			// take it over.
			res, err := s.DB.NewUpdate().Model((*IdempotencyKey)(nil)).
				Set("locked_until = ?", lockedUntil).Set("claim_token = ?", claim.Token).
				Where("organization_id = ?", orgID).Where("idempotency_key = ?", key).
				Where("response_status IS NULL").Where("locked_until <= ?", at).
				Exec(ctx)
			if err != nil {
				return IdempotencyClaim{}, nil, err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				return claim, nil, nil
			}
			continue
		}
		return IdempotencyClaim{}, existing, nil
	}
	return IdempotencyClaim{}, nil, errors.New("idempotency key changed hands too often to claim")
}

// IdempotencyKey reads a key's row.
func (s *Store) IdempotencyKey(ctx context.Context, orgID int64, key string) (*IdempotencyKey, error) {
	row := new(IdempotencyKey)
	err := s.DB.NewSelect().Model(row).
		Where("organization_id = ?", orgID).Where("idempotency_key = ?", key).
		Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, apperr.NotFoundf("idempotency key")
	}
	return row, err
}

// SaveIdempotentResponse stores the answer of a claimed key (sealed by the
// caller) and ends the claim.
func (s *Store) SaveIdempotentResponse(ctx context.Context, c IdempotencyClaim, status int, sealed []byte) error {
	_, err := s.DB.NewUpdate().Model((*IdempotencyKey)(nil)).ApplyQueryBuilder(c.held).
		Set("response_status = ?", status).Set("response_enc = ?", sealed).Set("locked_until = NULL").
		Where("response_status IS NULL").
		Exec(ctx)
	return err
}

// SaveIdempotentResponseIn stores the answer of a claimed key within db (the
// transaction of the operation it answers) and reports whether it did: false
// when the key holds an answer already or c no longer holds it. The claim
// stays locked: the request ends it (ReplaceIdempotentResponse), or undoes
// the operation and takes the answer back (UnanswerIdempotencyKey), and until
// then another request with the key waits. Should its process die, the
// answer counts once the lock runs out.
func SaveIdempotentResponseIn(ctx context.Context, db bun.IDB, c IdempotencyClaim, status int, sealed []byte) (bool, error) {
	res, err := db.NewUpdate().Model((*IdempotencyKey)(nil)).ApplyQueryBuilder(c.held).
		Set("response_status = ?", status).Set("response_enc = ?", sealed).
		Where("response_status IS NULL").
		Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ReplaceIdempotentResponse overwrites the answer of a key whose operation
// stored it in its own transaction (SaveIdempotentResponseIn) with the answer
// as it was sent, headers included, and ends the claim.
func (s *Store) ReplaceIdempotentResponse(ctx context.Context, c IdempotencyClaim, status int, sealed []byte) error {
	_, err := s.DB.NewUpdate().Model((*IdempotencyKey)(nil)).ApplyQueryBuilder(c.held).
		Set("response_status = ?", status).Set("response_enc = ?", sealed).Set("locked_until = NULL").
		Exec(ctx)
	return err
}

// ExtendIdempotencyClaim keeps a claim alive while its request runs: the lock
// moves to lockFor from now. A claim that is answered (when its request
// ended), released or taken over is left as it is.
func (s *Store) ExtendIdempotencyClaim(ctx context.Context, c IdempotencyClaim, lockFor time.Duration) error {
	_, err := s.DB.NewUpdate().Model((*IdempotencyKey)(nil)).ApplyQueryBuilder(c.held).
		Set("locked_until = ?", now().Add(lockFor)).
		Where("locked_until IS NOT NULL").
		Exec(ctx)
	return err
}

// ReleaseIdempotencyKey gives up a claim without an answer (the operation
// failed in a way worth retrying): the next request with the key runs it.
func (s *Store) ReleaseIdempotencyKey(ctx context.Context, c IdempotencyClaim) error {
	_, err := s.DB.NewDelete().Model((*IdempotencyKey)(nil)).ApplyQueryBuilder(c.held).
		Where("response_status IS NULL").
		Exec(ctx)
	return err
}

// UnanswerIdempotencyKey takes back the answer an operation stored with
// itself (SaveIdempotentResponseIn), which was undone after all: the key is
// a claim again, still the request's, which releases it when it ends. A
// retry waits until then and runs the operation itself. Deleted at once,
// the key could be claimed by a retry that the request's own release then
// took away.
func (s *Store) UnanswerIdempotencyKey(ctx context.Context, c IdempotencyClaim) error {
	_, err := s.DB.NewUpdate().Model((*IdempotencyKey)(nil)).ApplyQueryBuilder(c.held).
		Set("response_status = NULL").Set("response_enc = NULL").
		Where("locked_until IS NOT NULL").
		Exec(ctx)
	return err
}

// DeleteExpiredIdempotencyKeys removes the keys that expired by at and
// returns how many.
func (s *Store) DeleteExpiredIdempotencyKeys(ctx context.Context, at time.Time) (int64, error) {
	res, err := s.DB.NewDelete().Model((*IdempotencyKey)(nil)).Where("expires_at <= ?", at.UTC()).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
