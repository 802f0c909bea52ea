package store

import (
	"context"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// DKIMKey is one key pair of a domain; selector is "<token>-<position>".
type DKIMKey struct {
	bun.BaseModel `bun:"table:dkim_keys"`

	Selector      string     `bun:"selector,pk"`
	DomainID      int64      `bun:"domain_id,notnull"`
	Position      int        `bun:"position,notnull"`
	PrivateKeyEnc []byte     `bun:"private_key_enc,notnull"`
	PublicKey     string     `bun:"public_key,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	PublishedAt   *time.Time `bun:"published_at"`
}

// InsertDKIMKeyIfAbsent stores a key unless the selector already has one, and
// returns the stored key either way: an activity retried after a crash keeps the
// key it made the first time instead of replacing a key already published.
func (s *Store) InsertDKIMKeyIfAbsent(ctx context.Context, k *DKIMKey) (*DKIMKey, error) {
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	if _, err := s.DB.NewInsert().Model(k).On("CONFLICT (selector) DO NOTHING").Exec(ctx); err != nil {
		return nil, err
	}
	stored := new(DKIMKey)
	err := s.DB.NewSelect().Model(stored).Where("selector = ?", k.Selector).Scan(ctx)
	return stored, notFound(err)
}

// DKIMKeys returns a domain's keys by position.
func (s *Store) DKIMKeys(ctx context.Context, domainID int64) ([]DKIMKey, error) {
	var ks []DKIMKey
	err := s.DB.NewSelect().Model(&ks).Where("domain_id = ?", domainID).OrderExpr("position").Scan(ctx)
	return ks, err
}

// MarkDKIMKeysPublished records when a domain's keys went out.
func (s *Store) MarkDKIMKeysPublished(ctx context.Context, domainID int64, at time.Time) error {
	_, err := s.DB.NewUpdate().Model((*DKIMKey)(nil)).Set("published_at = ?", at).
		Where("domain_id = ?", domainID).Where("published_at IS NULL").Exec(ctx)
	return err
}

// PublishedRecord is a TXT record of the DKIM zone served by `mailyard dns`.
type PublishedRecord struct {
	bun.BaseModel `bun:"table:published_records"`

	Name      string    `bun:"name,pk"`
	Value     string    `bun:"value,notnull"`
	UpdatedAt time.Time `bun:"updated_at,notnull"`
}

// UpsertPublishedTXT publishes (or replaces) the TXT value at name.
func (s *Store) UpsertPublishedTXT(ctx context.Context, name, value string) error {
	rec := &PublishedRecord{Name: strings.ToLower(name), Value: value, UpdatedAt: now()}
	_, err := s.DB.NewInsert().Model(rec).
		On("CONFLICT (name) DO UPDATE").
		Set("value = EXCLUDED.value").Set("updated_at = EXCLUDED.updated_at").
		Exec(ctx)
	return err
}

// DeletePublishedTXT removes the record at name; a missing name is fine.
func (s *Store) DeletePublishedTXT(ctx context.Context, name string) error {
	_, err := s.DB.NewDelete().Model((*PublishedRecord)(nil)).Where("name = ?", strings.ToLower(name)).Exec(ctx)
	return err
}

// LookupTXT serves the embedded DNS server: the TXT values at name, none if absent.
func (s *Store) LookupTXT(ctx context.Context, name string) ([]string, error) {
	var values []string
	err := s.DB.NewSelect().Model((*PublishedRecord)(nil)).Column("value").
		Where("name = ?", strings.ToLower(name)).Scan(ctx, &values)
	return values, err
}
