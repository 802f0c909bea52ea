package api_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

var rateLimitHeader = regexp.MustCompile(`^"default";r=(\d+);t=(\d+)$`)

func TestRateLimitPerKey(t *testing.T) {
	h := newHarnessWith(t, map[string]string{"MAILYARD_RATE_LIMIT": "5/s"})
	_, otherKey := h.newOrg("other")

	first := h.do("GET", "/api/v1/domains", h.adminKey, nil)
	first.data(t, 200)
	if p := first.Header.Get("RateLimit-Policy"); p != `"default";q=10;w=2` {
		t.Fatalf("RateLimit-Policy %q", p)
	}
	m := rateLimitHeader.FindStringSubmatch(first.Header.Get("RateLimit"))
	if m == nil || m[1] != "9" || m[2] != "1" {
		t.Fatalf("RateLimit %q", first.Header.Get("RateLimit"))
	}

	// Spend the burst of 10 (a little refills while we go), then 429.
	var refused response
	allowed := 1
	for range 100 {
		r := h.do("GET", "/api/v1/domains", h.adminKey, nil)
		if r.Status == 429 {
			refused = r
			break
		}
		r.data(t, 200)
		allowed++
	}
	if allowed < 10 || refused.Status != 429 {
		t.Fatalf("%d requests allowed before a 429 (%d)", allowed, refused.Status)
	}
	refused.expectError(t, 429, "rate_limited")
	retry, err := strconv.Atoi(refused.Header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 2 {
		t.Fatalf("Retry-After %q", refused.Header.Get("Retry-After"))
	}
	if refused.Header.Get("RateLimit-Policy") == "" {
		t.Fatal("429 without RateLimit-Policy")
	}
	if m := rateLimitHeader.FindStringSubmatch(refused.Header.Get("RateLimit")); m == nil || m[1] != "0" || m[2] == "0" {
		t.Fatalf("429 with RateLimit %q", refused.Header.Get("RateLimit"))
	}

	// Another key has its own bucket.
	h.do("GET", "/api/v1/domains", otherKey, nil).data(t, 200)
	// Unauthenticated answers carry no rate-limit headers: no key, no bucket.
	if r := h.do("GET", "/api/v1/domains", "", nil); r.Header.Get("RateLimit") != "" {
		t.Fatalf("401 with RateLimit %q", r.Header.Get("RateLimit"))
	}

	// A client that honours Retry-After gets through.
	time.Sleep(time.Duration(retry) * time.Second)
	h.do("GET", "/api/v1/domains", h.adminKey, nil).data(t, 200)
}

func TestRateLimitOff(t *testing.T) {
	h := newHarnessWith(t, map[string]string{"MAILYARD_RATE_LIMIT": "off"})
	for range 50 {
		r := h.do("GET", "/api/v1/domains", h.adminKey, nil)
		r.data(t, 200)
		if r.Header.Get("RateLimit") != "" || r.Header.Get("RateLimit-Policy") != "" {
			t.Fatalf("limits off, yet headers %v", r.Header)
		}
	}
}
