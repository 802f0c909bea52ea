// Package periodic runs the processes' background sweeps (idempotency keys,
// expired secrets, unstarted workflows, unhandled inbound messages,
// retention): each is a function run again and again until its process
// stops.
package periodic

import (
	"context"
	"time"
)

// Every runs f first after first, then every period from start to start
// (a pass that takes longer is followed at once by the next, never run
// beside it), until ctx ends.
func Every(ctx context.Context, first, period time.Duration, f func(context.Context)) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A pass that outlasted the period finds the timer fired
			// and, perhaps, the context ended too: select picks either.
			if ctx.Err() != nil {
				return
			}
		}
		t.Reset(period)
		f(ctx)
	}
}
