// Package retention erases what MAILYARD_EMAIL_RETENTION allows to keep no
// longer: the content and signed messages of emails sent longer ago, and of
// emails never sent whose run has ended (an operator terminated it); the
// bytes and addresses of inbound messages handled longer ago, or received
// longer ago and never handled (docs/sending.md, "Retention"). Every worker
// process sweeps; the sweeps are idempotent, so several may overlap.
package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/periodic"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/workflows/email"
)

// batch is how many rows one statement erases: small enough that a pass
// holds its row locks briefly, large enough that a pass after a long pause
// catches up in a few statements.
const batch = 500

// AbandonedAfter is how long after its creation an email never sent may
// still be on its way: scheduled at most 30 days ahead, then about a day of
// attempts on the default schedule (docs/sending.md), and a day to spare.
// An email older than that and not sent, whose run has ended, was
// abandoned; its content is erased the retention time after that.
const AbandonedAfter = 32 * 24 * time.Hour

// abandonedBatch is how many abandoned emails a pass looks at: each costs
// a question to Temporal.
const abandonedBatch = 100

// Period is how often a process sweeps for a retention time: a quarter of
// it, between a second and a minute, so a message outlives its retention
// by at most that.
func Period(retention time.Duration) time.Duration {
	return min(max(retention/4, time.Second), time.Minute)
}

// Sweep erases, every Period(retention) until ctx ends, what is older
// than retention, and the abandoned emails (EraseAbandoned) when tc is
// set.
func Sweep(ctx context.Context, st *store.Store, tc client.Client, retention time.Duration, logger *slog.Logger) {
	every := Period(retention)
	periodic.Every(ctx, every, every, func(ctx context.Context) {
		cutoff := time.Now().Add(-retention)
		err := Once(ctx, st, cutoff)
		if tc != nil {
			_, aerr := EraseAbandoned(ctx, st, tc, cutoff.Add(-AbandonedAfter))
			err = errors.Join(err, aerr)
		}
		if err != nil && ctx.Err() == nil {
			logger.WarnContext(ctx, "retention sweep", "error", err)
		}
	})
}

// Once erases everything sent or handled before cutoff, and the inbound
// messages received before it and never handled, a batch at a time: emails,
// then inbound messages, each whatever became of the other.
func Once(ctx context.Context, st *store.Store, cutoff time.Time) error {
	var errs []error
	for _, erase := range []func(context.Context, time.Time, int) (int, error){st.EraseEmailsSentBefore, st.EraseInboundHandledBefore, st.EraseInboundUnhandledBefore} {
		for {
			n, err := erase(ctx, cutoff, batch)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if n < batch {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// EraseAbandoned erases the content and signed messages of up to
// abandonedBatch emails created before cutoff, never sent, whose run has
// ended, oldest first, and reports how many it erased. Nothing will send
// them: a run that ended (terminated, or failed) cannot be started again
// under its id. An email whose run Temporal does not know is erased only
// when a run accepted it (Temporal forgets a closed run after the
// namespace's retention); one no run accepted may yet be started by the
// API's sweep, which needs its content. An email whose run is still open
// is left to it; such emails come first in every pass, so a backlog of
// more than a batch of them, a month old, would hold the others back.
func EraseAbandoned(ctx context.Context, st *store.Store, tc client.Client, cutoff time.Time) (int, error) {
	emails, err := st.UnsentEmailsCreatedBefore(ctx, cutoff, abandonedBatch)
	if err != nil {
		return 0, err
	}
	erased := 0
	for _, e := range emails {
		known, open, err := temporalclient.RunOf(ctx, tc, email.WorkflowID(e.ID))
		if err != nil {
			return erased, err
		}
		if open || !known && !e.Accepted {
			continue
		}
		if err := st.EraseEmailContent(ctx, e.ID); err != nil {
			return erased, err
		}
		erased++
	}
	return erased, nil
}
