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
	unstartedEmailAge = 2 * time.Minute

	// startEmailTimeout bounds the start of an email's workflow: a request
	// that cannot start it in that time removes the email and answers 503.
	startEmailTimeout = 30 * time.Second

	// unstartedEmailSweepEvery is how often the sweep runs, and
	// unstartedEmailBatch how many emails one pass looks at.
	unstartedEmailSweepEvery = time.Minute
	unstartedEmailBatch      = 100
)

// SweepUnstartedEmails finishes what an API process left undone when it died
// (SIGKILL, power loss) between storing an email and starting its workflow,
// which would otherwise leave the email queued for ever:
//   - an email whose answer committed with it (a request with an
//     Idempotency-Key: the client gets that answer when it retries) has its
//     workflow started;
//   - any other email is removed: the client got no answer, nothing was sent
//     or counted, and its retry is the email that is sent.
//
// An email whose workflow exists, running or not, is left alone. It returns
// how many emails it started and removed.
func (s *Server) SweepUnstartedEmails(ctx context.Context) (started, removed int, err error) {
	emails, err := s.store.UnacceptedEmailsBefore(ctx, time.Now().Add(-unstartedEmailAge), unstartedEmailBatch)
	if err != nil {
		return 0, 0, err
	}
	for i := range emails {
		e := &emails[i]
		_, err := s.temporal.DescribeWorkflowExecution(ctx, email.WorkflowID(e.ID), "")
		var notFound *serviceerror.NotFound
		if !errors.As(err, &notFound) {
			if err != nil {
				return started, removed, err // Temporal unreachable: try again next pass
			}
			continue // started; waiting for a worker
		}
		if e.Answered {
			if err := s.startEmail(ctx, e); err != nil {
				return started, removed, err
			}
			s.logger.InfoContext(ctx, "started the workflow of an answered email whose API process died first", "email_id", e.ID)
			started++
			continue
		}
		if err := s.store.DeleteUnstartedEmail(ctx, e.ID); err != nil {
			return started, removed, err
		}
		s.logger.InfoContext(ctx, "removed an unanswered email whose workflow never started", "email_id", e.ID)
		removed++
	}
	return started, removed, nil
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
		if _, _, err := s.SweepUnstartedEmails(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "sweeping unstarted emails", "error", err)
		}
	}
}
