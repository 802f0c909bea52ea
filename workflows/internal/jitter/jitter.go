// Package jitter spreads the waits of the workflows' retry schedules.
package jitter

import (
	"hash/fnv"
	"strconv"
	"time"
)

// fraction is the ±20 % spread of the retry schedules (docs/webhooks.md,
// docs/sending.md). It keeps receivers that failed at the same moment from
// being retried all at the same moment.
const fraction = 0.2

// Spread spreads a scheduled wait by up to ±20 %. The spread is derived from
// a business key (a delivery or email id) and the attempt number rather
// than drawn at random, so it is deterministic on replay without a side
// effect in the history, and two series that failed together still spread
// out.
func Spread(wait time.Duration, key string, attempt int) time.Duration {
	if wait <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{':'})
	h.Write([]byte(strconv.Itoa(attempt)))
	unit := float64(h.Sum64()>>11) / float64(1<<53) // uniform in [0, 1)
	factor := 1 - fraction + 2*fraction*unit
	return time.Duration(float64(wait) * factor)
}
