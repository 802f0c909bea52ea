package store

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
)

// CreateCredential stores a new API key (already carrying its organization, domain,
// digest and permissions). A digest collision is a conflict (ErrConflict).
func (s *Store) CreateCredential(ctx context.Context, key *APIKey) error {
	return insertAPIKey(ctx, s.DB, key)
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
