package delivery

import (
	"hash/fnv"
	"strconv"
	"time"
)

// jitterFraction is the ±20 % spread of docs/webhooks.md. It keeps receivers that
// failed at the same moment from being retried all at the same moment.
const jitterFraction = 0.2

// jittered spreads a scheduled wait by up to ±20 %. The spread is derived from
// the delivery id and the attempt number rather than drawn at random, so it
// is deterministic on replay without a side effect in the history, and two
// deliveries that failed together still spread out.
func jittered(wait time.Duration, deliveryID string, attempt int) time.Duration {
	if wait <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(deliveryID))
	h.Write([]byte{':'})
	h.Write([]byte(strconv.Itoa(attempt)))
	unit := float64(h.Sum64()>>11) / float64(1<<53) // uniform in [0, 1)
	factor := 1 - jitterFraction + 2*jitterFraction*unit
	return time.Duration(float64(wait) * factor)
}

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
