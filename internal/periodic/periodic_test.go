package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Every runs its function again and again, one pass at a time even when a
// pass outlasts the period, and returns once the context ends.
func TestEveryRepeatsOnePassAtATimeUntilCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var passes, running, overlapped atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, 2*time.Millisecond, func(context.Context) {
			if running.Add(1) > 1 {
				overlapped.Add(1)
			}
			time.Sleep(5 * time.Millisecond) // longer than the period
			running.Add(-1)
			if passes.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if passes.Load() != 3 || overlapped.Load() != 0 {
		t.Fatalf("%d passes (want 3), %d overlapping", passes.Load(), overlapped.Load())
	}
}
