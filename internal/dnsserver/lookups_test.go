package dnsserver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowSource answers after a delay, counting the look-ups it runs and the
// most it ran at once.
type slowSource struct {
	delay            time.Duration
	calls, now, peak atomic.Int32
	values           []string
}

func (s *slowSource) LookupTXT(context.Context, string) ([]string, error) {
	s.calls.Add(1)
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	time.Sleep(s.delay)
	return s.values, nil
}

// A name asked again within cacheTTL is answered from memory; a flood of
// look-ups never runs more than maxLookups at once, and those that find no
// slot in time are refused (SERVFAIL) rather than queued on the database.
func TestLookupsAreCachedAndBounded(t *testing.T) {
	src := &slowSource{delay: 300 * time.Millisecond, values: []string{"v=DKIM1; p=abc"}}
	l := newLookups(src)
	ctx := context.Background()
	for range 3 {
		if v, _, err := l.txt(ctx, "sel._domainkey.example"); err != nil || len(v) != 1 {
			t.Fatalf("%v, %v", v, err)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d look-ups for one name asked three times, want 1", n)
	}

	src.values = nil // made-up names: nothing to cache
	var busy atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 * maxLookups {
		wg.Go(func() {
			if _, _, err := l.txt(ctx, "made-up-"+string(rune('a'+i%26))+string(rune('a'+i/26))); errors.Is(err, errBusy) {
				busy.Add(1)
			}
		})
	}
	wg.Wait()
	if p := src.peak.Load(); p > maxLookups {
		t.Fatalf("%d look-ups ran at once, want at most %d", p, maxLookups)
	}
	if b := busy.Load(); b < 2*maxLookups {
		t.Fatalf("%d of %d look-ups refused while the slots were busy, want at least %d", b, 4*maxLookups, 2*maxLookups)
	}
}

// While the slots are busy (a flood of made-up names) or the database
// fails, a name read within staleTTL is answered with its last values, not
// SERVFAIL; one never read, or read longer ago, is still refused.
func TestLookupsServeStaleValuesWhenBusy(t *testing.T) {
	l := newLookups(&slowSource{values: []string{"v=DKIM1; p=abc"}})
	ctx := context.Background()
	if _, _, err := l.txt(ctx, selector); err != nil {
		t.Fatal(err)
	}
	l.age(selector, cacheTTL)
	l.occupySlots(t)
	if v, _, err := l.txt(ctx, selector); err != nil || len(v) != 1 || v[0] != "v=DKIM1; p=abc" {
		t.Fatalf("a selector read %v ago, while busy: %v, %v", cacheTTL, v, err)
	}
	if _, _, err := l.txt(ctx, "never-read._domainkey.example"); !errors.Is(err, errBusy) {
		t.Fatalf("a name never read, while busy: %v, want errBusy", err)
	}
	l.age(selector, staleTTL)
	if _, _, err := l.txt(ctx, selector); !errors.Is(err, errBusy) {
		t.Fatalf("a selector read more than %v ago, while busy: %v, want errBusy", staleTTL, err)
	}
}

// A name that is read again and found gone (deleted, rotated out) is never
// answered stale afterwards.
func TestLookupsForgetAGoneName(t *testing.T) {
	src := &slowSource{values: []string{"v=DKIM1; p=abc"}}
	l := newLookups(src)
	ctx := context.Background()
	if _, _, err := l.txt(ctx, selector); err != nil {
		t.Fatal(err)
	}
	l.age(selector, cacheTTL)
	src.values = nil
	if v, _, err := l.txt(ctx, selector); err != nil || len(v) != 0 {
		t.Fatalf("a gone name: %v, %v", v, err)
	}
	l.occupySlots(t)
	if _, _, err := l.txt(ctx, selector); !errors.Is(err, errBusy) {
		t.Fatalf("a gone name while busy: %v, want errBusy, not its old values", err)
	}
}

const selector = "sel._domainkey.example"

// age makes name's cached values older, as if read by earlier.
func (l *lookups) age(name string, by time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cached[name]
	c.at = c.at.Add(-by)
	l.cached[name] = c
}

// occupySlots takes every look-up slot until the test ends, as slow
// look-ups of a flood would.
func (l *lookups) occupySlots(t *testing.T) {
	for range maxLookups {
		l.slots <- struct{}{}
	}
	t.Cleanup(func() {
		for range maxLookups {
			<-l.slots
		}
	})
}
