package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzRetryAfter checks the Retry-After reader against any header value,
// status and clock: the delay is always within 0..maxRetryAfter; only 429
// and 503 give a delay; surrounding whitespace does not matter; a
// delay-seconds value gives exactly that many seconds (capped); an HTTP date
// gives the time from now until it (capped, 0 if past).
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC).Unix()
	for _, v := range []string{
		"0", "1", "120", " 30 ", "604800", "604801", "18446744073709551615", "18446744073709551616",
		"-1", "+5", "1.5", "1e3", "0x10", "", " ", "\x00", "Sat, 21 Nov 2026 10:00:30 GMT",
		"Saturday, 21-Nov-26 10:00:30 GMT", "Sat Nov 21 10:00:30 2026", "Fri, 20 Nov 2026 10:00:00 GMT",
		"Sun, 06 Nov 9999 08:49:37 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "Sat, 21 Nov 2026 10:00:30 PST",
		"Sat, 31 Feb 2026 10:00:30 GMT", "120, 60", "٣",
	} {
		f.Add(v, 429, now)
		f.Add(v, 503, now)
	}
	f.Add("120", 200, now)
	f.Add("120", 500, now)
	f.Add("Sat, 21 Nov 2026 10:00:30 GMT", 503, int64(-1<<62))
	f.Fuzz(func(t *testing.T, value string, status int, nowUnix int64) {
		clock := time.Unix(nowUnix, 0)
		resp := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {value}}}
		d := retryAfter(resp, clock)
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("retryAfter(%q, status %d) = %s; want 0..%s", value, status, d, maxRetryAfter)
		}
		if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
			if d != 0 {
				t.Fatalf("retryAfter(%q, status %d) = %s; only 429 and 503 give a delay", value, status, d)
			}
			return
		}
		padded := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {" \t" + value + " "}}}
		if again := retryAfter(padded, clock); again != d {
			t.Fatalf("retryAfter(%q) = %s but with surrounding whitespace %s", value, d, again)
		}
		v := strings.TrimSpace(value)
		if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
			want := maxRetryAfter
			if secs < uint64(maxRetryAfter/time.Second) {
				want = time.Duration(secs) * time.Second
			}
			if d != want {
				t.Fatalf("retryAfter(%q) = %s; want %s", value, d, want)
			}
		} else if at, err := http.ParseTime(v); err == nil {
			want := min(max(at.Sub(clock), 0), maxRetryAfter)
			if d != want {
				t.Fatalf("retryAfter(%q) at %s = %s; want %s", value, clock, d, want)
			}
		} else if d != 0 {
			t.Fatalf("retryAfter(%q) = %s for an unreadable value; want 0", value, d)
		}
	})
}
