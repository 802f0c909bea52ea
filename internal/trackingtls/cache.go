package trackingtls

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/crypto/acme/autocert"

	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
)

// Cache is an autocert.Cache over the store's acme_cache table, shared by
// every process on the database. Entries (PEM private keys and certificates)
// are sealed with the box, bound to their key (Binding): a row copied to
// another key does not open.
type Cache struct {
	store *store.Store
	box   *secrets.Box
}

var _ autocert.Cache = (*Cache)(nil)

// NewCache returns a cache that seals entries with box.
func NewCache(st *store.Store, box *secrets.Box) *Cache {
	return &Cache{store: st, box: box}
}

// Binding is what the entry at key is sealed to.
func Binding(key string) []byte { return secrets.Binding("acme_cache", key) }

// Get returns the entry at key, autocert.ErrCacheMiss when there is none. An
// entry that does not open (another encryption key, tampering) is an error,
// not a miss: a miss would make autocert order a new certificate and
// overwrite the entry the other processes can still open.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, error) {
	e, err := c.store.ACMECacheEntry(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, autocert.ErrCacheMiss
	}
	if err != nil {
		return nil, fmt.Errorf("acme cache: read %q: %w", key, err)
	}
	data, err := c.box.Open(e.Data, Binding(key))
	if err != nil {
		return nil, fmt.Errorf("acme cache: open %q: %w", key, err)
	}
	return data, nil
}

// Put seals data and stores it at key, replacing what was there.
func (c *Cache) Put(ctx context.Context, key string, data []byte) error {
	sealed, err := c.box.Seal(data, Binding(key))
	if err != nil {
		return fmt.Errorf("acme cache: seal %q: %w", key, err)
	}
	if err := c.store.PutACMECacheEntry(ctx, key, sealed); err != nil {
		return fmt.Errorf("acme cache: write %q: %w", key, err)
	}
	return nil
}

// Delete removes the entry at key; a missing key is not an error.
func (c *Cache) Delete(ctx context.Context, key string) error {
	if err := c.store.DeleteACMECacheEntry(ctx, key); err != nil {
		return fmt.Errorf("acme cache: delete %q: %w", key, err)
	}
	return nil
}
