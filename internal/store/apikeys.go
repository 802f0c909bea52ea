package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
)

// Key statuses.
const (
	KeyActive  = "active"
	KeyRevoked = "revoked"
)

// Permissions are a key's permissions: send, stats, admin.
type Permissions = CommaList

// APIKey is a credential. Only the SHA-256 digest of the secret is stored.
type APIKey struct {
	bun.BaseModel `bun:"table:api_keys"`

	ID              int64       `bun:"id,pk,autoincrement"`
	OrganizationID  int64       `bun:"organization_id,notnull"`
	SendingDomainID *int64      `bun:"sending_domain_id"`
	Label           string      `bun:"label,notnull"`
	Username        string      `bun:"username,notnull"`
	Prefix          string      `bun:"prefix,notnull"`
	Digest          []byte      `bun:"digest,notnull"`
	Permissions     Permissions `bun:"permissions,notnull"`
	Status          string      `bun:"status,notnull"`
	LastUsedAt      *time.Time  `bun:"last_used_at"`
	CreatedAt       time.Time   `bun:"created_at,notnull"`
	RevokedAt       *time.Time  `bun:"revoked_at"`

	// SendingDomain is the domain name, filled by the list query.
	SendingDomain *string `bun:"sending_domain,scanonly"`
	// Domain is the domain the key sends from, read with the key by
	// ActiveAPIKeyByDigest; nil for an organization-wide key and for one
	// whose domain was deleted.
	Domain *Domain `bun:"rel:belongs-to,join:sending_domain_id=id"`
}

func insertAPIKey(ctx context.Context, db bun.IDB, key *APIKey) error {
	if key.CreatedAt.IsZero() {
		key.CreatedAt = now()
	}
	if key.Status == "" {
		key.Status = KeyActive
	}
	_, err := db.NewInsert().Model(key).Returning("id").Exec(ctx)
	if isUniqueViolation(err) {
		// Two random 256-bit keys with one digest: a new request makes a new key.
		return apperr.Errorf(apperr.Conflict, "credential", "another credential has the same key; send the request again")
	}
	return err
}

// ActiveAPIKeyByDigest resolves a presented key, with the domain it sends
// from (APIKey.Domain) in the same query: a send reads both, and reads them
// on every request. It always reads the database: a revoked key must fail on
// the very next request on every process.
func (s *Store) ActiveAPIKeyByDigest(ctx context.Context, digest []byte) (*APIKey, error) {
	key := new(APIKey)
	err := s.DB.NewSelect().Model(key).
		Column("api_key.id", "api_key.organization_id", "api_key.sending_domain_id", "api_key.username", "api_key.permissions", "api_key.last_used_at").
		Relation("Domain").
		Where("api_key.digest = ?", digest).Where("api_key.status = ?", KeyActive).
		Scan(ctx)
	if err != nil {
		return key, notFound(err, "credential")
	}
	if d := key.Domain; d != nil && (d.ID == 0 || d.DeletedAt != nil || d.OrganizationID != key.OrganizationID) {
		key.Domain = nil
	}
	return key, nil
}

// TouchAPIKey records a use, at most once per interval: the condition makes the
// write a no-op when another request or process recorded one recently.
func (s *Store) TouchAPIKey(ctx context.Context, id int64, at time.Time, interval time.Duration) (bool, error) {
	res, err := s.DB.NewUpdate().Model((*APIKey)(nil)).
		Set("last_used_at = ?", at).
		Where("id = ?", id).
		Where("last_used_at IS NULL OR last_used_at <= ?", at.Add(-interval)).
		Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
