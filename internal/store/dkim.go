package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/secrets"
)

// DKIM key states (README "Domain lifecycle"). A selector holds one active or
// standby key at a time; a replacement key is publishing beside the standby key
// it replaces; a retired key is no longer published and its private key is
// erased.
const (
	DKIMPublishing = "publishing"
	DKIMActive     = "active"
	DKIMStandby    = "standby"
	DKIMRetired    = "retired"
)

// DKIMKey is one key pair behind a selector ("<token>-<position>"). Rotation
// replaces the key behind a selector, so a selector has a generation per key.
type DKIMKey struct {
	bun.BaseModel `bun:"table:dkim_keys"`

	ID         int64  `bun:"id,pk,autoincrement"`
	Selector   string `bun:"selector,notnull"`
	DomainID   int64  `bun:"domain_id,notnull"`
	Position   int    `bun:"position,notnull"`
	Generation int    `bun:"generation,notnull"`
	State      string `bun:"state,notnull"`
	Bits       int    `bun:"bits,notnull"`
	// PrivateKeyEnc is sealed with DKIMKeyBinding; nil once erased.
	PrivateKeyEnc []byte     `bun:"private_key_enc"`
	PublicKey     string     `bun:"public_key,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	PublishedAt   *time.Time `bun:"published_at"`
	RetiredAt     *time.Time `bun:"retired_at"`
}

// DKIMKeyBinding names the exact key row a private key is sealed to: its
// selector and generation. Generation 1 keeps the form of the first release
// (the selector alone), so keys stored then still open.
func DKIMKeyBinding(selector string, generation int) []byte {
	if generation <= 1 {
		return secrets.Binding("dkim_keys", selector)
	}
	return secrets.Binding("dkim_keys", selector+"#"+strconv.Itoa(generation))
}

// InsertDKIMKeyIfAbsent stores a key unless the selector already has one of that
// generation, and returns the stored key either way: an activity retried after a
// crash keeps the key it made the first time instead of replacing a key already
// published.
func (s *Store) InsertDKIMKeyIfAbsent(ctx context.Context, k *DKIMKey) (*DKIMKey, error) {
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	if k.Generation == 0 {
		k.Generation = 1
	}
	if k.State == "" {
		k.State = DKIMPublishing
	}
	if _, err := s.DB.NewInsert().Model(k).On("CONFLICT (selector, generation) DO NOTHING").Exec(ctx); err != nil {
		return nil, err
	}
	stored := new(DKIMKey)
	err := s.DB.NewSelect().Model(stored).Where("selector = ?", k.Selector).Where("generation = ?", k.Generation).Scan(ctx)
	return stored, notFound(err, "DKIM key")
}

// CurrentDKIMKeys returns a domain's keys that are not retired, by position and
// generation: the active and standby keys, and a replacement being published.
func (s *Store) CurrentDKIMKeys(ctx context.Context, domainID int64) ([]DKIMKey, error) {
	var ks []DKIMKey
	err := s.DB.NewSelect().Model(&ks).Where("domain_id = ?", domainID).Where("state <> ?", DKIMRetired).
		OrderExpr("position, generation").Scan(ctx)
	return ks, err
}

// MarkOnboardingKeysPublished records that a new domain's first keys went out:
// key 1 becomes active (it signs), key 2 the standby. Repeating it is harmless.
func (s *Store) MarkOnboardingKeysPublished(ctx context.Context, domainID int64, at time.Time) error {
	_, err := s.DB.NewUpdate().Model((*DKIMKey)(nil)).
		Set("published_at = ?", at).
		Set("state = CASE WHEN position = 1 THEN ? ELSE ? END", DKIMActive, DKIMStandby).
		Where("domain_id = ?", domainID).Where("generation = 1").Where("state = ?", DKIMPublishing).
		Exec(ctx)
	return err
}

// ErrNoDKIMKey is returned when a domain has no key in the state asked for.
var ErrNoDKIMKey = errors.New("no such DKIM key")

// DKIMKeyInState returns the domain's key in state (active, standby or
// publishing; the lowest generation first).
func (s *Store) DKIMKeyInState(ctx context.Context, domainID int64, state string) (*DKIMKey, error) {
	k := new(DKIMKey)
	err := s.DB.NewSelect().Model(k).Where("id = (?)", keyInState(s.DB, domainID, state)).Scan(ctx)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNoDKIMKey
		}
		return nil, err
	}
	return k, nil
}

// keyInState selects the id of domain's key in state, the lowest generation
// of several: DKIMKeyInState's rule, also used inside EmailToPrepare's query
// (domain is then the outer query's column).
func keyInState(db bun.IDB, domain any, state string) *bun.SelectQuery {
	return db.NewSelect().Model((*DKIMKey)(nil)).Column("id").
		Where("domain_id = ?", domain).Where("state = ?", state).OrderExpr("generation").Limit(1)
}

// DKIMSelectors lists every selector a domain has ever had keys for, which are
// the names its deletion removes from the zone.
func (s *Store) DKIMSelectors(ctx context.Context, domainID int64) ([]string, error) {
	var selectors []string
	err := s.DB.NewSelect().Model((*DKIMKey)(nil)).ColumnExpr("DISTINCT selector").
		Where("domain_id = ?", domainID).OrderExpr("selector").Scan(ctx, &selectors)
	return selectors, err
}

// EraseDKIMKeys retires every key of a domain and erases the private keys.
func (s *Store) EraseDKIMKeys(ctx context.Context, domainID int64) error {
	at := now()
	_, err := s.DB.NewUpdate().Model((*DKIMKey)(nil)).
		Set("state = ?", DKIMRetired).Set("private_key_enc = NULL").
		Set("retired_at = COALESCE(retired_at, ?)", at).
		Where("domain_id = ?", domainID).
		Where("state <> ? OR private_key_enc IS NOT NULL", DKIMRetired).
		Exec(ctx)
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
