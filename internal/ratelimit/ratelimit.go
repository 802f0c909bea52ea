// Package ratelimit is the token bucket per key that Mailyard's limits
// share: per API key, which the ways of using a key go through (each API
// request, and each message submitted over SMTP, each server with buckets
// of its own; docs/api-conventions.md, "Rate limits"), and per client
// address, for the messages of the inbound SMTP server (docs/inbound.md).
package ratelimit

import (
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mailyard/mailyard/internal/config"
)

// Rate limits are a token bucket per API key, held in this process's memory:
// with several API processes behind a load balancer, a key gets the limit once
// per process. The headers follow draft-ietf-httpapi-ratelimit-headers-10
// (September 2025): structured fields with a quoted policy name,
//
//	RateLimit-Policy: "default";q=40;w=2   (quota q over a window of w seconds)
//	RateLimit: "default";r=39;t=1          (r requests left, full again in t seconds)
//
// For a bucket of burst B refilled at R per second, q is B and w is B/R: a client
// that waits w seconds has its whole quota again.

// PolicyName names the one policy in the headers.
const PolicyName = `"default"`

// sweepEvery is how often idle buckets are dropped.
const sweepEvery = time.Minute

// Limiter holds one bucket per key K (an API key's id, a client address).
type Limiter[K comparable] struct {
	perSecond float64
	burst     int
	// Policy is the RateLimit-Policy value, the same on every answer.
	Policy string

	mu        sync.Mutex
	buckets   map[K]*bucket
	lastSweep time.Time
}

type bucket struct {
	limiter  *rate.Limiter
	lastSeen time.Time
}

// New returns nil when limits are off.
func New[K comparable](l config.RateLimit) *Limiter[K] {
	if l.Off() {
		return nil
	}
	window := int(math.Ceil(float64(l.Burst()) / l.PerSecond()))
	return &Limiter[K]{
		perSecond: l.PerSecond(),
		burst:     l.Burst(),
		Policy:    PolicyName + ";q=" + strconv.Itoa(l.Burst()) + ";w=" + strconv.Itoa(window),
		buckets:   map[K]*bucket{},
	}
}

// Verdict is the outcome of one use against its key's bucket.
type Verdict struct {
	Allowed    bool
	Remaining  int           // whole tokens left after this use
	Full       time.Duration // until the bucket is full again
	RetryAfter time.Duration // until one token is back (refused uses)
}

// Take spends a token of key's bucket, if one is there.
func (r *Limiter[K]) Take(key K, now time.Time) Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(now)
	b := r.buckets[key]
	if b == nil {
		b = &bucket{limiter: rate.NewLimiter(rate.Limit(r.perSecond), r.burst)}
		r.buckets[key] = b
	}
	b.lastSeen = now
	v := Verdict{Allowed: b.limiter.AllowN(now, 1)}
	tokens := b.limiter.TokensAt(now)
	v.Remaining = max(0, int(math.Floor(tokens)))
	v.Full = seconds((float64(r.burst) - tokens) / r.perSecond)
	if !v.Allowed {
		v.RetryAfter = max(time.Second, seconds((1-tokens)/r.perSecond))
	}
	return v
}

// sweep drops buckets idle long enough to have refilled: a new bucket is full,
// so forgetting them changes nothing but memory.
func (r *Limiter[K]) sweep(now time.Time) {
	if now.Sub(r.lastSweep) < sweepEvery {
		return
	}
	r.lastSweep = now
	idle := seconds(float64(r.burst) / r.perSecond)
	for key, b := range r.buckets {
		if now.Sub(b.lastSeen) > idle {
			delete(r.buckets, key)
		}
	}
}

// size is the number of buckets held (tests).
func (r *Limiter[K]) size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buckets)
}

// seconds rounds a duration in seconds up to whole seconds, as the headers
// carry it.
func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(s-1e-9)) * time.Second
}
