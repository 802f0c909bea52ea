// Package keyauth checks an API key the one way every entry point does: the
// API's bearer token and SMTP submission's AUTH (docs/credentials.md). The
// checksum rejects mistyped and made-up keys before the database is asked;
// then the key must be active. Nothing is cached, so a revoked key fails at
// its next use, on every process.
package keyauth

import (
	"context"
	"errors"

	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
)

// ErrMalformed is a secret that is not an API key at all.
var ErrMalformed = errors.New("malformed API key")

// Check returns the active key whose secret this is: ErrMalformed for a
// secret that fails the checksum, store.ErrNotFound for an unknown or
// revoked key, another error when the database cannot answer.
func Check(ctx context.Context, st *store.Store, secret string) (*store.APIKey, error) {
	if keys.CheckAPIKey(secret) != nil {
		return nil, ErrMalformed
	}
	return st.ActiveAPIKeyByDigest(ctx, keys.Digest(secret))
}

// New makes a new API key: its secret, shown to its owner once and never
// stored, and the row that keeps only the secret's digest and display
// prefix (docs/credentials.md). The caller fills in the organization and
// sending domain.
func New(label, username string, perms store.Permissions) (secret string, row *store.APIKey, err error) {
	secret, err = keys.NewAPIKey()
	if err != nil {
		return "", nil, err
	}
	return secret, WithSecret(secret, &store.APIKey{Label: label, Username: username, Permissions: perms}), nil
}

// WithSecret fills in what a key row keeps of its secret: the digest the
// key is found by, and the prefix shown to tell keys apart. It is the one
// place that derives them.
func WithSecret(secret string, row *store.APIKey) *store.APIKey {
	row.Prefix, row.Digest = secret[:keys.DisplayLength], keys.Digest(secret)
	return row
}
