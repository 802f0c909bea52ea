package dnsserver

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The zone's look-ups go to the database Mailyard shares, and anyone on
// the internet can send queries: a flood of them must not become a flood
// of SELECTs. Two guards:
//   - a name's values are kept for cacheTTL, so the few names receivers
//     really ask for (the selectors of active keys) are answered from
//     memory however often they are asked;
//   - at most maxLookups look-ups run at once; a query that finds them all
//     busy for lookupSlotWait is answered SERVFAIL (resolvers ask again),
//     which is what a flood of made-up names gets. A name whose values
//     were read within staleTTL is answered with them instead (RFC 8767's
//     serve-stale): the selectors receivers ask for, which a flood would
//     otherwise push out of memory 2 s after their last read, keep being
//     answered while the flood lasts, or while the database is away, with
//     a TTL of staleAnswerTTL, so resolvers ask again soon (RFC 8767 §4).
const (
	cacheTTL       = 2 * time.Second
	staleTTL       = 5 * time.Minute
	staleAnswerTTL = 30 // seconds
	maxCached      = 10_000
	maxLookups     = 16
	lookupSlotWait = 100 * time.Millisecond
)

// errBusy is the look-up refused because maxLookups are running.
var errBusy = errors.New("too many DNS look-ups at once")

// lookups is the guarded path from a query to the Source.
type lookups struct {
	src   Source
	slots chan struct{}

	mu     sync.Mutex
	cached map[string]cachedValues
}

type cachedValues struct {
	values []string
	at     time.Time
}

func newLookups(src Source) *lookups {
	return &lookups{src: src, slots: make(chan struct{}, maxLookups), cached: map[string]cachedValues{}}
}

// txt returns name's TXT values, from the cache when they were read less
// than cacheTTL ago, or less than staleTTL ago when they cannot be read now
// (stale). Only names with values are cached: made-up names would only fill
// it.
func (l *lookups) txt(ctx context.Context, name string) (values []string, stale bool, err error) {
	now := time.Now()
	l.mu.Lock()
	c, ok := l.cached[name]
	l.mu.Unlock()
	if ok && now.Sub(c.at) < cacheTTL {
		return c.values, false, nil
	}

	values, err = l.lookup(ctx, name)
	if err != nil && ok && now.Sub(c.at) < staleTTL {
		return c.values, true, nil
	}
	if err == nil && len(values) == 0 && ok {
		// Gone (deleted, rotated out): never served stale again.
		l.mu.Lock()
		delete(l.cached, name)
		l.mu.Unlock()
	}
	if err != nil || len(values) == 0 {
		return values, false, err
	}
	l.mu.Lock()
	if len(l.cached) >= maxCached {
		l.cached = map[string]cachedValues{}
	}
	l.cached[name] = cachedValues{values: values, at: now}
	l.mu.Unlock()
	return values, false, nil
}

// lookup reads name's values in one of the slots.
func (l *lookups) lookup(ctx context.Context, name string) ([]string, error) {
	wait := time.NewTimer(lookupSlotWait)
	defer wait.Stop()
	select {
	case l.slots <- struct{}{}:
	case <-wait.C:
		return nil, errBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-l.slots }()
	return l.src.LookupTXT(ctx, name)
}
