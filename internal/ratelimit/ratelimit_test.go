package ratelimit

import (
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/config"
)

func TestRateLimiterBucketMath(t *testing.T) {
	r := New[int64](config.RateLimit{Requests: 600, Per: time.Minute})
	if r.Policy != `"default";q=1200;w=120` {
		t.Fatalf("policy %q", r.Policy)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := r.Take(1, t0)
	if !v.Allowed || v.Remaining != 1199 || v.Full != time.Second {
		t.Fatalf("first take %+v", v)
	}
	for range 1199 {
		r.Take(1, t0)
	}
	v = r.Take(1, t0)
	if v.Allowed || v.Remaining != 0 || v.RetryAfter != time.Second || v.Full != 120*time.Second {
		t.Fatalf("over the limit %+v", v)
	}
	// 10 per second: after 0.25 s, two tokens are back.
	if v = r.Take(1, t0.Add(250*time.Millisecond)); !v.Allowed || v.Remaining != 1 {
		t.Fatalf("after refill %+v", v)
	}
	if New[int64](config.RateLimit{}) != nil {
		t.Fatal("off limits build a limiter")
	}
}

func TestRateLimiterEvictsIdleBuckets(t *testing.T) {
	r := New[int64](config.RateLimit{Requests: 20, Per: time.Second})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Take(1, t0)
	r.Take(2, t0.Add(sweepEvery-time.Second))
	if r.size() != 2 {
		t.Fatalf("%d buckets", r.size())
	}
	// A sweep a minute later drops key 1 (idle, so full again) and keeps key 2,
	// which was used within its refill time.
	r.Take(3, t0.Add(sweepEvery))
	if r.size() != 2 || r.buckets[1] != nil || r.buckets[2] == nil {
		t.Fatalf("after sweep: %v", r.buckets)
	}
}
