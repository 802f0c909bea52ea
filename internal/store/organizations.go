package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// Organization owns every other resource.
type Organization struct {
	bun.BaseModel `bun:"table:organizations"`

	ID        int64     `bun:"id,pk,autoincrement"`
	Name      string    `bun:"name,notnull"`
	CreatedAt time.Time `bun:"created_at,notnull"`
}

// CreateOrganizationWithKey creates an organization and its bootstrap key in one
// transaction, so an organization never exists without a way in.
func (s *Store) CreateOrganizationWithKey(ctx context.Context, name string, key *APIKey) (*Organization, error) {
	org := &Organization{Name: name, CreatedAt: now()}
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(org).Returning("id").Exec(ctx); err != nil {
			return err
		}
		key.OrganizationID = org.ID
		return insertAPIKey(ctx, tx, key)
	})
	if err != nil {
		return nil, err
	}
	return org, nil
}

// OrganizationByName finds the first organization with that name.
func (s *Store) OrganizationByName(ctx context.Context, name string) (*Organization, error) {
	org := new(Organization)
	err := s.DB.NewSelect().Model(org).Where("name = ?", name).OrderExpr("id").Limit(1).Scan(ctx)
	return org, notFound(err, "organization")
}
