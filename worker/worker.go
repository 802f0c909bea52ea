// Package worker builds Mailyard's Temporal workers: one per task queue, each with
// its workflows and the activities that hold their dependencies.
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/retention"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/store"
)

// Deps are what the activities need; the caller owns their lifecycle.
type Deps struct {
	Config *config.Config
	Client client.Client
	Store  *store.Store
	Box    *secrets.Box
	Logger *slog.Logger
	// WebhookClient sends webhook deliveries; nil builds webhook.NewClient
	// from Config (tests pass one that trusts their receiver's CA).
	WebhookClient *http.Client
	// Events emits platform events from activities; nil builds one on Client
	// and Store with the default delivery schedule.
	Events *platformevents.Emitter
	// EmailSender sends email; nil builds one from Config (tests pass one
	// that trusts their SMTP server's CA).
	EmailSender *smtpsend.Sender
}

// NewEmitter is the platform-event emitter of a worker: it stores events in
// st and starts their delivery workflows through tc.
func NewEmitter(st *store.Store, tc client.Client, logger *slog.Logger) *platformevents.Emitter {
	return &platformevents.Emitter{Store: st, Runs: &deliveryruns.Runs{Temporal: tc, Store: st, Logger: logger}}
}

// stopMargin is added to a task queue's longest activity to make its
// worker's stop timeout: time for the attempt to record its result after
// its own time is up.
const stopMargin = 15 * time.Second

// StopTimeout is the longest a worker process takes to stop gracefully: the
// email worker's, which waits for an SMTP attempt. deploy/ gives the worker
// pods a termination grace period above it (a test checks).
const StopTimeout = emailStopTimeout

// workerOptions are the options every worker shares: its stop timeout, and a
// fatal error reported on fatal instead of leaving the worker idle in a
// process that looks alive. The SDK calls an error fatal when polling keeps
// failing with one it cannot recover from (the namespace not found, an
// invalid argument, a server that refuses this SDK version) for two minutes.
func workerOptions(stopTimeout time.Duration, fatal chan<- error) sdkworker.Options {
	o := PollerOptions()
	o.WorkerStopTimeout = stopTimeout
	o.DeadlockDetectionTimeout = deadlockDetectionTimeout
	o.OnFatalError = func(err error) {
		select {
		case fatal <- err:
		default: // one is enough to stop the process
		}
	}
	return o
}

// PollerOptions are how every worker fetches its tasks: as many long polls
// as the backlog needs, scaled by the SDK on the server's hints, instead of
// the SDK's fixed two per kind of task. Two polls cap a worker at what two
// round trips to the server can fetch: the email worker, whose workflow
// tasks carry the first attempt, reached about two thirds of the
// throughput that enough polls give (README, "Benchmarks"). The
// benchmarks' baseline workers take the same options.
func PollerOptions() sdkworker.Options {
	scaled := sdkworker.NewPollerBehaviorAutoscaling(sdkworker.PollerBehaviorAutoscalingOptions{})
	return sdkworker.Options{WorkflowTaskPollerBehavior: scaled, ActivityTaskPollerBehavior: scaled}
}

// Run starts every worker and blocks until ctx ends, then stops them
// together: running activities get their worker's stop timeout to finish
// (StopTimeout at most). A fatal error of any worker stops them all and is
// returned, so the process exits and is restarted instead of idling. While
// the workers run, the process also sweeps for messages past their
// retention time (internal/retention).
func Run(ctx context.Context, d Deps) error {
	if d.Events == nil {
		d.Events = NewEmitter(d.Store, d.Client, d.Logger)
	}
	fatal := make(chan error, 1)
	builders := []func(Deps, chan<- error) (sdkworker.Worker, error){newDomainWorker, newWebhookWorker, newEmailWorker}
	var started []sdkworker.Worker
	defer func() {
		var wg sync.WaitGroup
		for _, w := range started {
			wg.Go(w.Stop)
		}
		wg.Wait()
	}()
	for _, build := range builders {
		w, err := build(d, fatal)
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		started = append(started, w)
	}
	// The sweep ends before Run returns: the caller closes the store after.
	sweepCtx, stopSweep := context.WithCancel(ctx)
	var sweeping sync.WaitGroup
	sweeping.Go(func() {
		retention.Sweep(sweepCtx, d.Store, d.Client, d.Config.EmailRetention, d.Logger.With("component", "retention"))
	})
	defer func() { stopSweep(); sweeping.Wait() }()
	select {
	case <-ctx.Done():
		d.Logger.Info("stopping workers", "timeout", StopTimeout.String())
		return nil
	case err := <-fatal:
		return fmt.Errorf("worker stopped on a fatal error: %w", err)
	}
}
