package trackingtls

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/acme/autocert"
)

// The host policy's limits. Anyone can send a ClientHello with any name to
// the listener, and each one asks Allowed (a database query). Neither
// answer is remembered: a removed domain must stop being served at once,
// and one just verified must be served at once (a refusal remembered for a
// while made its first clicks fail).
const (
	// lookupTimeout bounds one Allowed call, and the wait for a turn to
	// make it; autocert gives a handshake five minutes.
	lookupTimeout = 5 * time.Second
	// maxLookups is how many Allowed calls run at once: a flood of
	// handshakes with made-up names (each one a query) waits for its turn
	// rather than taking the connection pool the API shares.
	maxLookups = 4
)

// policy asks Allowed whether a name may have a certificate, within the
// limits above.
type policy struct {
	allowed func(ctx context.Context, host string) (bool, error)
	turns   chan struct{}
}

func newPolicy(allowed func(ctx context.Context, host string) (bool, error)) *policy {
	return &policy{allowed: allowed, turns: make(chan struct{}, maxLookups)}
}

// allow reports whether host (normalized) is a verified custom tracking
// domain.
func (p *policy) allow(ctx context.Context, host string) (bool, error) {
	return inTurn(ctx, p, func(ctx context.Context) (bool, error) { return p.allowed(ctx, host) })
}

// inTurn runs lookup, a database query, in one of the policy's turns,
// within lookupTimeout.
func inTurn[T any](ctx context.Context, p *policy, lookup func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	select {
	case p.turns <- struct{}{}:
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("waiting for a turn to ask: %w", ctx.Err())
	}
	defer func() { <-p.turns }()
	return lookup(ctx)
}

// errUnanswered is a host policy that could not ask whether a name is
// verified (the database down, or a flood of handshakes whose lookups wait
// their turn past lookupTimeout): the handshake fails, whatever the name.
var errUnanswered = errors.New("cannot tell whether it is a verified custom tracking domain")

// hostPolicy is autocert's check before it serves or orders a certificate
// in a handshake.
func (p *policy) hostPolicy(ctx context.Context, host string) error {
	host = NormalizeHost(host)
	ok, err := p.allow(ctx, host)
	if err != nil {
		return fmt.Errorf("trackingtls: %q: %w: %w", host, errUnanswered, err)
	}
	if !ok {
		return fmt.Errorf("trackingtls: %q: %w", host, ErrNotAllowed)
	}
	return nil
}

// policyCache stores a certificate only for a name the policy accepts.
//
// autocert checks HostPolicy in a handshake only: the renewal timer it
// starts for a certificate it holds in memory renews it for as long as the
// process runs, and writes each renewal to the cache. Removing or changing
// a custom domain deletes its certificates from the cache
// (store.SetDomainTracking); without this check the next renewal of a
// process that served it would write them back.
//
// A refused name's certificate is dropped without an error: autocert
// retries a renewal that fails every 30 to 60 minutes, each time ordering
// a certificate from the CA again, and would spend the CA's rate limits.
// Dropped, the renewal keeps the certificate in memory, where no handshake
// gets it (HostPolicy refuses the name), until the next renewal is due.
//
// Get of a certificate is left alone: in a handshake HostPolicy has just
// accepted the name, and autocert calls Get holding the lock every
// handshake takes, so a query there would hold up all of them. Get of a
// challenge certificate ("name+token") is another matter: autocert asks for
// one, before and without HostPolicy, in every handshake that offers only
// the acme-tls/1 protocol, whatever its name; it takes a turn of the
// policy's lookups, so that a flood of those waits its turn too.
type policyCache struct {
	autocert.Cache
	policy *policy
}

// Get reads key from the cache, a challenge certificate in a turn.
func (c policyCache) Get(ctx context.Context, key string) ([]byte, error) {
	if !strings.HasSuffix(key, "+token") {
		return c.Cache.Get(ctx, key)
	}
	return inTurn(ctx, c.policy, func(ctx context.Context) ([]byte, error) { return c.Cache.Get(ctx, key) })
}

// Put stores data at key unless key is a certificate (autocert's keys
// "name" and "name+rsa") of a name the policy refuses. The other keys
// (the account key "acme_account+key", challenge certificates
// "name+token") are stored as they come: challenges belong to orders
// HostPolicy allowed.
func (c policyCache) Put(ctx context.Context, key string, data []byte) error {
	name := strings.TrimSuffix(key, "+rsa")
	if strings.Contains(name, "+") {
		return c.Cache.Put(ctx, key, data)
	}
	ok, err := c.policy.allow(ctx, NormalizeHost(name))
	if err != nil {
		return fmt.Errorf("trackingtls: not caching %q: is it a verified custom tracking domain: %w", key, err)
	}
	if !ok {
		return nil
	}
	return c.Cache.Put(ctx, key, data)
}
