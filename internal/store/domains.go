package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// Domain statuses.
const (
	DomainPending  = "pending"
	DomainVerified = "verified"
	DomainFailed   = "failed"
)

// Domain is a customer's sending domain.
type Domain struct {
	bun.BaseModel `bun:"table:domains"`

	ID                int64     `bun:"id,pk,autoincrement"`
	OrganizationID    int64     `bun:"organization_id,notnull"`
	Domain            string    `bun:"domain,notnull"`
	MailFromSubdomain string    `bun:"mailfrom_subdomain,notnull"`
	Status            string    `bun:"status,notnull"`
	CreatedAt         time.Time `bun:"created_at,notnull"`
}

// ListDomains returns an organization's domains, oldest first.
func (s *Store) ListDomains(ctx context.Context, orgID int64) ([]Domain, error) {
	domains := []Domain{}
	err := s.DB.NewSelect().Model(&domains).
		Where("organization_id = ?", orgID).
		OrderExpr("id").
		Scan(ctx)
	return domains, err
}
