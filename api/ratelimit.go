package api

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
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
const rateLimitPolicyName = `"default"`

// rateLimitSweepEvery is how often idle buckets are dropped.
const rateLimitSweepEvery = time.Minute

// rateLimiter holds one bucket per API key.
type rateLimiter struct {
	perSecond float64
	burst     int
	policy    string // the RateLimit-Policy value, the same on every answer

	mu        sync.Mutex
	buckets   map[int64]*bucket
	lastSweep time.Time
}

type bucket struct {
	limiter  *rate.Limiter
	lastSeen time.Time
}

// newRateLimiter returns nil when limits are off.
func newRateLimiter(l config.RateLimit) *rateLimiter {
	if l.Off() {
		return nil
	}
	window := int(math.Ceil(float64(l.Burst()) / l.PerSecond()))
	return &rateLimiter{
		perSecond: l.PerSecond(),
		burst:     l.Burst(),
		policy:    rateLimitPolicyName + ";q=" + strconv.Itoa(l.Burst()) + ";w=" + strconv.Itoa(window),
		buckets:   map[int64]*bucket{},
	}
}

// verdict is the outcome of one request against its key's bucket.
type verdict struct {
	allowed    bool
	remaining  int           // whole tokens left after this request
	full       time.Duration // until the bucket is full again
	retryAfter time.Duration // until one token is back (refused requests)
}

// take spends a token of key's bucket, if one is there.
func (r *rateLimiter) take(key int64, now time.Time) verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(now)
	b := r.buckets[key]
	if b == nil {
		b = &bucket{limiter: rate.NewLimiter(rate.Limit(r.perSecond), r.burst)}
		r.buckets[key] = b
	}
	b.lastSeen = now
	v := verdict{allowed: b.limiter.AllowN(now, 1)}
	tokens := b.limiter.TokensAt(now)
	v.remaining = max(0, int(math.Floor(tokens)))
	v.full = seconds((float64(r.burst) - tokens) / r.perSecond)
	if !v.allowed {
		v.retryAfter = max(time.Second, seconds((1-tokens)/r.perSecond))
	}
	return v
}

// sweep drops buckets idle long enough to have refilled: a new bucket is full,
// so forgetting them changes nothing but memory.
func (r *rateLimiter) sweep(now time.Time) {
	if now.Sub(r.lastSweep) < rateLimitSweepEvery {
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
func (r *rateLimiter) size() int {
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

// admitRate charges the request to its key, sets the rate-limit headers and, over
// the limit, answers 429. It reports whether the request may go on.
func (s *Server) admitRate(ctx huma.Context, keyID int64) bool {
	if s.limits == nil {
		return true
	}
	v := s.limits.take(keyID, time.Now())
	ctx.SetHeader("RateLimit-Policy", s.limits.policy)
	ctx.SetHeader("RateLimit", rateLimitPolicyName+";r="+strconv.Itoa(v.remaining)+";t="+strconv.Itoa(int(v.full/time.Second)))
	if v.allowed {
		return true
	}
	e := newError(CodeRateLimited,
		"this API key is over its rate limit; retry after "+strconv.Itoa(int(v.retryAfter/time.Second))+" s")
	e.headers.Set("Retry-After", strconv.Itoa(int(v.retryAfter/time.Second)))
	writeMiddlewareError(s.api, ctx, e)
	return false
}
