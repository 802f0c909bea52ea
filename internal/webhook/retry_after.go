package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter caps absurd values before they reach the schedule, which
// clamps further; it only keeps the arithmetic away from overflow.
const maxRetryAfter = 7 * 24 * time.Hour

// retryAfter reads Retry-After on the two statuses where the product
// honours it (429 and 503). The header holds either delay-seconds or an
// HTTP date; anything unreadable or in the past gives 0.
func retryAfter(resp *http.Response, now time.Time) time.Duration {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}
