package tracking_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mailyard/mailyard/internal/tracking"
)

// Close returns only once every job queued before it has run, including
// the ones a worker or Close is still running, and a job added while or
// after it closes runs too: the api closes the queue after its listeners
// have shut down, and then closes the store. (The old queue stopped when
// its context ended, while requests still in flight added jobs nobody
// would run, and did not wait for them.)
func TestQueueCloseRunsEveryJob(t *testing.T) {
	q := tracking.NewQueue(4, slog.New(slog.DiscardHandler))
	runDone := make(chan struct{})
	go func() { q.Run(1); close(runDone) }()

	var ran atomic.Int64
	count := func(context.Context) error { ran.Add(1); return nil }

	// The one worker is busy with a job that ends only when released, and
	// four more wait in the queue.
	started, release := make(chan struct{}), make(chan struct{})
	q.Add(func(context.Context) error { close(started); <-release; ran.Add(1); return nil })
	<-started
	for range 4 {
		q.Add(count)
	}

	// Adders race Close.
	const adders, each = 8, 100
	var wg sync.WaitGroup
	for range adders {
		wg.Go(func() {
			for range each {
				q.Add(count)
			}
		})
	}
	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	wg.Wait()
	close(release)
	<-closed
	<-runDone
	if got, want := ran.Load(), int64(1+4+adders*each); got != want {
		t.Fatalf("%d jobs ran by the time Close returned, want %d", got, want)
	}

	// After Close, Add runs the job itself.
	q.Add(count)
	if got := ran.Load(); got != int64(1+4+adders*each+1) {
		t.Fatalf("a job added after Close did not run in Add (%d ran)", got)
	}
	q.Close() // a second Close is harmless
}

// Close without Run runs the queued jobs itself.
func TestQueueCloseWithoutRun(t *testing.T) {
	q := tracking.NewQueue(10, slog.New(slog.DiscardHandler))
	var ran atomic.Int64
	for range 3 {
		q.Add(func(context.Context) error { ran.Add(1); return nil })
	}
	if ran.Load() != 0 {
		t.Fatal("jobs ran before anything worked the queue")
	}
	q.Close()
	if ran.Load() != 3 {
		t.Fatalf("%d of 3 jobs ran", ran.Load())
	}
}
