package inbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mailyard/mailyard/internal/periodic"
	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/smtpserver"
	inboundwf "github.com/mailyard/mailyard/workflows/inbound"
)

// Sweep defaults: a message whose workflow could not be started when it
// arrived (Temporal down) is started by the sweep once it is this old, at
// this interval, this many at a time.
const (
	DefaultSweepAfter = time.Minute
	DefaultSweepEvery = 30 * time.Second
	sweepBatch        = 100
)

// Listener is where and how the server listens.
type Listener struct {
	Addr string
	// Server holds the shared SMTP listener rules (certificate, connection
	// cap); its Hostname defaults to the bounce host.
	Server smtpserver.Config
	// SweepAfter and SweepEvery override the sweep's defaults (tests).
	SweepAfter, SweepEvery time.Duration
}

// Serve listens on l.Addr and serves until ctx ends, with the sweep beside
// it. ready, if not nil, gets the address once it listens.
func (b *Backend) Serve(ctx context.Context, l Listener, ready func(addr string)) error {
	cfg := l.Server
	if cfg.Hostname == "" {
		cfg.Hostname = b.BounceHost
	}
	if cfg.Logger == nil {
		cfg.Logger = b.Logger
	}
	srv, err := smtpserver.New(cfg, b)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		return fmt.Errorf("inbound listener (MAILYARD_INBOUND_ADDR): %w", err)
	}
	b.Logger.Info("listening", "listener", "inbound", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	b.starts = smtpserver.Starts{} // a Backend may serve again after a stop
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	sweepCtx, stopSweep := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() { defer close(swept); b.sweep(sweepCtx, l.SweepAfter, l.SweepEvery) }()

	select {
	case err = <-served:
	case <-ctx.Done():
		// Idle clients get 421 at once; a message under way has this long to
		// finish, and is cut after it (still an ordinary stop).
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = srv.Shutdown(shutdownCtx)
		cancel()
		<-served
	}
	stopSweep()
	<-swept
	b.starts.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// sweep starts, every so often, the workflows of messages that are stored
// but not handled: their start failed when they arrived. A start of a
// message whose workflow exists changes nothing.
func (b *Backend) sweep(ctx context.Context, after, every time.Duration) {
	if after <= 0 {
		after = DefaultSweepAfter
	}
	if every <= 0 {
		every = DefaultSweepEvery
	}
	periodic.Every(ctx, every, every, func(ctx context.Context) {
		if err := b.SweepOnce(ctx, time.Now().Add(-after)); err != nil && ctx.Err() == nil {
			b.Logger.Warn("inbound sweep", "error", err)
		}
	})
}

// SweepOnce starts the workflows of messages received before cutoff that
// are not handled yet, and marks each message whose start went through, so
// that later passes no longer look at it: its run exists now, or existed
// (a start of the id of a run that ended joins that run, without handling
// the message again), and a pass can do nothing more for it.
func (b *Backend) SweepOnce(ctx context.Context, cutoff time.Time) (err error) {
	rows, err := b.Store.UnhandledInboundBefore(ctx, cutoff, sweepBatch)
	if err != nil {
		return err
	}
	// Marked once at the end of the pass (or when it stops early): one
	// write for the batch.
	var seen []string
	defer func() {
		if merr := b.Store.MarkInboundWorkflowsSeen(ctx, seen); merr != nil {
			err = errors.Join(err, merr) // started again next pass: harmless
		}
	}()
	for _, m := range rows {
		var owner searchattr.Owner
		if m.OrganizationID != nil && m.DomainID != nil {
			owner = searchattr.Owner{OrganizationID: *m.OrganizationID, DomainID: *m.DomainID}
		}
		startCtx, cancel := context.WithTimeout(ctx, startTimeout)
		err := inboundwf.Start(startCtx, b.Temporal, m.ID, owner, b.Retention)
		cancel()
		if err != nil {
			return err
		}
		seen = append(seen, m.ID)
	}
	return nil
}
