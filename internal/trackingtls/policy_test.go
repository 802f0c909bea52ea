package trackingtls

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// asker is an Allowed that accepts the names in verified and counts what
// it is asked.
type asker struct {
	mu       sync.Mutex
	verified map[string]bool
	failing  map[string]bool
	asked    map[string]int
}

func newAsker(verified ...string) *asker {
	a := &asker{verified: map[string]bool{}, failing: map[string]bool{}, asked: map[string]int{}}
	for _, v := range verified {
		a.verified[v] = true
	}
	return a
}

func (a *asker) allowed(_ context.Context, host string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked[host]++
	if a.failing[host] {
		return false, errors.New("database is down")
	}
	return a.verified[host], nil
}

func (a *asker) count(host string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asked[host]
}

func (a *asker) set(host string, verified bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.verified[host] = verified
}

// Allowed gets lookupTimeout, not the five minutes autocert gives a
// handshake, and at most maxLookups calls run at once: another one waits
// for a turn within that time, and fails when it runs out.
func TestPolicyBoundsLookups(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var asked []string
	deadlines := make(chan time.Time, maxLookups)
	p := newPolicy(func(ctx context.Context, host string) (bool, error) {
		mu.Lock()
		asked = append(asked, host)
		mu.Unlock()
		if host == "late.example" {
			return true, nil
		}
		d, _ := ctx.Deadline()
		deadlines <- d
		entered <- struct{}{}
		<-release
		return true, nil
	})
	handshake, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	handshakeDeadline, _ := handshake.Deadline()

	var wg sync.WaitGroup
	for i := range maxLookups {
		wg.Go(func() {
			if ok, err := p.allow(handshake, fmt.Sprintf("busy%d.example", i)); !ok || err != nil {
				t.Errorf("busy lookup: %v %v", ok, err)
			}
		})
	}
	for range maxLookups {
		<-entered
		// lookupTimeout from its start: minutes before the handshake's.
		if d := <-deadlines; !d.Before(handshakeDeadline.Add(-time.Minute)) {
			t.Errorf("Allowed's deadline is only %s before the handshake's", handshakeDeadline.Sub(d))
		}
	}

	// Every turn is taken: a lookup whose time is up (here: at once) fails
	// without asking.
	over, stop := context.WithCancel(context.Background())
	stop()
	if ok, err := p.allow(over, "late.example"); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("a lookup with no turn: %v %v", ok, err)
	}
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, h := range asked {
		if h == "late.example" {
			t.Fatalf("Allowed was asked while %d calls ran", maxLookups)
		}
	}
}

// No answer is remembered: a name refused while its domain was pending is
// served as soon as it is verified, and one accepted is refused as soon as
// it is removed.
func TestManagerHostPolicyAsksEveryTime(t *testing.T) {
	a := newAsker()
	m, err := NewManager(Options{Allowed: a.allowed, Cache: &memCache{m: map[string][]byte{}}})
	if err != nil {
		t.Fatal(err)
	}
	const name = "track.shop.example"
	if err := m.HostPolicy(context.Background(), name); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("pending: %v", err)
	}
	a.set(name, true)
	if err := m.HostPolicy(context.Background(), name); err != nil {
		t.Fatalf("verified: %v", err)
	}
	a.set(name, false)
	if err := m.HostPolicy(context.Background(), name); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("removed: %v", err)
	}
}

// memCache is an autocert.Cache in memory.
type memCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (c *memCache) Get(_ context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.m[key]; ok {
		return d, nil
	}
	return nil, autocert.ErrCacheMiss
}

func (c *memCache) Put(_ context.Context, key string, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = data
	return nil
}

func (c *memCache) Delete(_ context.Context, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
	return nil
}

// The manager's cache stores the certificate of a name Allowed accepts
// only: autocert's renewal of a certificate it holds never asks HostPolicy,
// and would write a removed domain's certificates back to the cache the
// removal emptied. A refused one is dropped without an error (a failed
// renewal is retried, and each retry orders a certificate); the account
// key and challenge certificates are stored as they come.
func TestManagerCacheRefusesRemovedNames(t *testing.T) {
	a := newAsker("track.shop.example")
	a.failing["flaky.example"] = true
	mem := &memCache{m: map[string][]byte{}}
	m, err := NewManager(Options{Allowed: a.allowed, Cache: mem})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"track.shop.example", "track.shop.example+rsa", "acme_account+key", "removed.example+token", "removed.example", "removed.example+rsa"} {
		if err := m.Cache.Put(ctx, key, []byte("pem of "+key)); err != nil {
			t.Fatalf("Put %q: %v", key, err)
		}
	}
	if err := m.Cache.Put(ctx, "flaky.example", []byte("pem")); err == nil {
		t.Fatal("Put with a failing Allowed stored or dropped without an error")
	}
	want := map[string]bool{"track.shop.example": true, "track.shop.example+rsa": true, "acme_account+key": true, "removed.example+token": true}
	if len(mem.m) != len(want) {
		t.Errorf("stored %d entries, want %d", len(mem.m), len(want))
	}
	for key := range mem.m {
		if !want[key] {
			t.Errorf("stored %q", key)
		}
	}
	if n := a.count("acme_account+key") + a.count("acme_account") + a.count("removed.example+token"); n != 0 {
		t.Errorf("Allowed asked about keys that are not certificates (%d)", n)
	}
	// Get is the cache's own.
	if d, err := m.Cache.Get(ctx, "track.shop.example"); err != nil || string(d) != "pem of track.shop.example" {
		t.Fatalf("Get: %q %v", d, err)
	}
}

// blockingCache counts the Gets in flight and holds each until released.
type blockingCache struct {
	memCache
	inFlight, most atomic.Int32
	release        chan struct{}
}

func (c *blockingCache) Get(ctx context.Context, key string) ([]byte, error) {
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	<-c.release
	return c.memCache.Get(ctx, key)
}

// A handshake that offers only acme-tls/1 makes autocert read a challenge
// certificate from the cache for any name, without HostPolicy: a flood of
// them reads in the policy's turns, maxLookups at a time, not as many
// database queries as handshakes.
func TestChallengeCertificateReadsTakeTurns(t *testing.T) {
	cache := &blockingCache{memCache: memCache{m: map[string][]byte{}}, release: make(chan struct{})}
	m, err := NewManager(Options{Allowed: newAsker().allowed, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 3 * maxLookups {
		wg.Go(func() {
			_, _ = m.GetCertificate(&tls.ClientHelloInfo{ServerName: fmt.Sprintf("made-up-%d.example", i), SupportedProtos: []string{acme.ALPNProto}})
		})
	}
	time.Sleep(300 * time.Millisecond)
	if n := cache.inFlight.Load(); n != maxLookups {
		t.Errorf("%d cache reads at once, want %d", n, maxLookups)
	}
	close(cache.release)
	wg.Wait()
	if most := cache.most.Load(); most > maxLookups {
		t.Errorf("at most %d cache reads at once, want %d", most, maxLookups)
	}
}

// Only a name the policy accepted and the CA then failed is a warning;
// what anyone can send stays quiet: a refused name, a name the policy could
// not ask about (a flood waiting for lookups, the database down), a name
// that is not a host name, a challenge handshake.
func TestWarnOfFailures(t *testing.T) {
	p := newPolicy(newAsker().allowed)
	p.allowed = func(ctx context.Context, host string) (bool, error) {
		switch host {
		case "refused.example":
			return false, nil
		case "unknown.example":
			return false, errors.New("database is down")
		}
		return true, nil
	}
	get := func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if err := p.hostPolicy(context.Background(), hello.ServerName); err != nil {
			return nil, err
		}
		return nil, errors.New("acme: urn:ietf:params:acme:error:dns: NXDOMAIN")
	}
	for _, tc := range []struct {
		name   string
		protos []string
		warn   bool
	}{
		{name: "track.shop.example", warn: true},
		{name: "track.shop.example", protos: []string{"acme-tls/1"}},
		{name: "refused.example"},
		{name: "unknown.example"},
		{name: "localhost"},
		{name: ""},
	} {
		var logs bytes.Buffer
		warn := warnOfFailures(get, slog.New(slog.NewTextHandler(&logs, nil)))
		if _, err := warn(&tls.ClientHelloInfo{ServerName: tc.name, SupportedProtos: tc.protos}); err == nil {
			t.Fatalf("%q: no error", tc.name)
		}
		if got := strings.Contains(logs.String(), "level=WARN"); got != tc.warn {
			t.Errorf("%q %v: warned %v, want %v: %s", tc.name, tc.protos, got, tc.warn, logs.String())
		}
	}
}
