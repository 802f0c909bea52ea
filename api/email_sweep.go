package api

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/mailyard/mailyard/workflows/email"
)

const (
	// unstartedEmailAge is how old an email no workflow has accepted must be
	// before the sweep asks Temporal about it: far longer than a request takes
	// from storing an email to starting its workflow (startEmailTimeout).
	unstartedEmailAge = 10 * time.Minute

	// startEmailTimeout bounds the start of an email's workflow: a request
	// that cannot start it in that time removes the email and answers 503.
	startEmailTimeout = 30 * time.Second

	// unstartedEmailSweepEvery is how often the sweep runs, and
	// unstartedEmailBatch how many emails one pass looks at.
	unstartedEmailSweepEvery = 5 * time.Minute
	unstartedEmailBatch      = 100
)

// SweepUnstartedEmails removes emails whose workflow never started: their API
// process died (SIGKILL, power loss) between storing the email and starting
// the workflow. The client got no answer, nothing was sent or counted, and the
// email would otherwise stay queued for ever; a client that sends the request
// again (with the same Idempotency-Key or not) gets a new email. An email
// whose workflow exists, running or not, is left alone. It returns how many
// emails it removed.
func (s *Server) SweepUnstartedEmails(ctx context.Context) (int, error) {
	ids, err := s.store.UnacceptedEmailsBefore(ctx, time.Now().Add(-unstartedEmailAge), unstartedEmailBatch)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, id := range ids {
		_, err := s.temporal.DescribeWorkflowExecution(ctx, email.WorkflowID(id), "")
		var notFound *serviceerror.NotFound
		if !errors.As(err, &notFound) {
			if err != nil {
				return removed, err // Temporal unreachable: try again next pass
			}
			continue // started; waiting for a worker
		}
		if err := s.store.DeleteUnstartedEmail(ctx, id); err != nil {
			return removed, err
		}
		s.logger.InfoContext(ctx, "removed an email whose workflow never started", "email_id", id)
		removed++
	}
	return removed, nil
}

// sweepUnstartedEmails runs SweepUnstartedEmails every
// unstartedEmailSweepEvery until ctx ends. Every API process sweeps; the
// deletes are idempotent.
func (s *Server) sweepUnstartedEmails(ctx context.Context) {
	t := time.NewTicker(unstartedEmailSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.SweepUnstartedEmails(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "sweeping unstarted emails", "error", err)
		}
	}
}
