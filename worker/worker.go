// Package worker builds Mailyard's Temporal workers: one per task queue, each with
// its workflows and the activities that hold their dependencies.
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/platformevents"
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

// Run starts every worker and blocks until ctx ends, then stops them gracefully
// (running activities get the worker's stop timeout to finish).
func Run(ctx context.Context, d Deps) error {
	if d.Events == nil {
		d.Events = NewEmitter(d.Store, d.Client, d.Logger)
	}
	builders := []func(Deps) (sdkworker.Worker, error){newDomainWorker, newWebhookWorker, newEmailWorker}
	var started []sdkworker.Worker
	defer func() {
		for _, w := range started {
			w.Stop()
		}
	}()
	for _, build := range builders {
		w, err := build(d)
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		started = append(started, w)
	}
	<-ctx.Done()
	return nil
}
