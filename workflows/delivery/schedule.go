package delivery

import "time"

// clampRetryAfter turns a receiver's Retry-After into the wait before attempt
// next (an index into schedule). The receiver can postpone the attempt, but
// only up to where the attempt after it would have been (the schedule's next
// two steps), so a huge Retry-After cannot swallow the rest of the schedule;
// and it cannot bring the attempt forward, since the schedule is also the
// platform's own back-pressure.
func clampRetryAfter(retryAfter time.Duration, schedule []time.Duration, next int, scheduled time.Duration) time.Duration {
	upper := schedule[next]
	if next+1 < len(schedule) {
		upper += schedule[next+1]
	}
	return min(max(retryAfter, scheduled), max(upper, scheduled))
}
