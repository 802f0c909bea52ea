package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// ACMECacheEntry is one entry of the ACME certificate cache shared by the api
// processes (internal/trackingtls): the ACME account key, a certificate with
// its private key, or a TLS-ALPN-01 challenge certificate. Data is sealed by
// the caller (secrets.Binding("acme_cache", Key)); the store never sees it in
// plain text.
type ACMECacheEntry struct {
	bun.BaseModel `bun:"table:acme_cache"`

	Key       string    `bun:"key,pk"`
	Data      []byte    `bun:"data,notnull"`
	UpdatedAt time.Time `bun:"updated_at,notnull"`
}

// ACMECacheEntry returns the entry at key, or an error that errors.Is
// ErrNotFound when there is none.
func (s *Store) ACMECacheEntry(ctx context.Context, key string) (*ACMECacheEntry, error) {
	e := new(ACMECacheEntry)
	if err := s.DB.NewSelect().Model(e).Where("key = ?", key).Scan(ctx); err != nil {
		return nil, notFound(err, "acme cache entry")
	}
	return e, nil
}

// PutACMECacheEntry stores data at key, replacing what was there.
func (s *Store) PutACMECacheEntry(ctx context.Context, key string, data []byte) error {
	e := &ACMECacheEntry{Key: key, Data: data, UpdatedAt: now()}
	_, err := s.DB.NewInsert().Model(e).
		On("CONFLICT (key) DO UPDATE").
		Set("data = EXCLUDED.data").Set("updated_at = EXCLUDED.updated_at").
		Exec(ctx)
	return err
}

// DeleteACMECacheEntry removes the entry at key; a missing key is fine.
func (s *Store) DeleteACMECacheEntry(ctx context.Context, key string) error {
	_, err := s.DB.NewDelete().Model((*ACMECacheEntry)(nil)).Where("key = ?", key).Exec(ctx)
	return err
}
