package store

import (
	"context"
	"errors"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
)

// CreateCredential stores a new API key (already carrying its organization, domain,
// digest and permissions). A digest collision is a conflict (ErrConflict).
func (s *Store) CreateCredential(ctx context.Context, key *APIKey) error {
	return insertAPIKey(ctx, s.DB, key)
}

// CreateDomainCredential stores a new API key scoped to key.SendingDomainID
// (of key.OrganizationID) in one transaction that first reads that domain
// with its row locked, and calls check with it: a domain that is not the
// organization's, or is deleted, is (nil, ErrNotFound). When check answers
// an error, nothing is stored and that error is returned. The lock keeps
// the domain as check saw it until the key is stored, so a deletion, which
// revokes the domain's keys, comes either before (check sees it deleted) or
// after (it revokes this key too). On PostgreSQL it is FOR SHARE: it
// conflicts with every lock an update of the row takes, FOR UPDATE (which
// DeleteDomainForCustomer takes) and FOR NO KEY UPDATE alike, where FOR KEY
// SHARE (all the foreign key of the insert takes) conflicts with the first
// only. SQLite's transactions take turns.
func (s *Store) CreateDomainCredential(ctx context.Context, key *APIKey, check func(*Domain, error) error) error {
	if key.SendingDomainID == nil {
		return errors.New("a domain credential needs a sending domain")
	}
	return s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		d := new(Domain)
		q := tx.NewSelect().Model(d).Where("id = ?", *key.SendingDomainID)
		if s.IsPostgres() {
			q = q.For("SHARE")
		}
		err := notFound(q.Scan(ctx), "domain")
		switch {
		case errors.Is(err, ErrNotFound):
			d = nil
		case err != nil:
			return err
		case d.OrganizationID != key.OrganizationID || d.DeletedAt != nil:
			d, err = nil, apperr.NotFoundf("domain")
		}
		if err := check(d, err); err != nil {
			return err
		}
		return insertAPIKey(ctx, tx, key)
	})
}

// ActiveCredentials returns a page of an organization's active keys, oldest
// (lowest id) first, each with the name of its sending domain (nil for the
// organization-wide bootstrap key), and whether more follow. Page.After is a
// key id (int64).
func (s *Store) ActiveCredentials(ctx context.Context, orgID int64, page Page) ([]APIKey, bool, error) {
	creds := []APIKey{}
	q := s.DB.NewSelect().Model(&creds).
		ModelTableExpr("api_keys AS k").
		ColumnExpr("k.*").
		ColumnExpr("d.domain AS sending_domain").
		Join("LEFT JOIN domains AS d ON d.id = k.sending_domain_id").
		Where("k.organization_id = ?", orgID).
		Where("k.status = ?", KeyActive)
	more, err := scanPage(ctx, q, &creds, "k.id", Ascending, page)
	return creds, more, err
}

// RevokeCredential revokes an active key of the organization and returns it. The
// update is guarded by status, so of two concurrent revocations exactly one
// succeeds; an unknown, foreign or already revoked id is not found (ErrNotFound). Nothing caches
// keys: the authentication query reads the status on every request, so the key is
// refused everywhere as soon as this returns.
func (s *Store) RevokeCredential(ctx context.Context, orgID, id int64) (*APIKey, error) {
	key := new(APIKey)
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewUpdate().Model((*APIKey)(nil)).
			Set("status = ?", KeyRevoked).
			Set("revoked_at = ?", now()).
			Where("id = ?", id).
			Where("organization_id = ?", orgID).
			Where("status = ?", KeyActive).
			Exec(ctx)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return apperr.NotFoundf("credential")
		}
		return tx.NewSelect().Model(key).Where("id = ?", id).Scan(ctx)
	})
	if err != nil {
		return nil, notFound(err, "credential")
	}
	return key, nil
}
