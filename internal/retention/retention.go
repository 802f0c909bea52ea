// Package retention erases what MAILYARD_EMAIL_RETENTION allows to keep no
// longer: the content and signed messages of emails sent longer ago, and
// the bytes and addresses of inbound messages handled longer ago, or received
// longer ago and never handled (docs/sending.md, "Retention"). Every worker process sweeps; the sweeps
// are idempotent, so several may overlap.
package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/mailyard/mailyard/internal/periodic"
	"github.com/mailyard/mailyard/internal/store"
)

// batch is how many rows one statement erases: small enough that a pass
// holds its row locks briefly, large enough that a pass after a long pause
// catches up in a few statements.
const batch = 500

// Period is how often a process sweeps for a retention time: a quarter of
// it, between a second and a minute, so a message outlives its retention
// by at most that.
func Period(retention time.Duration) time.Duration {
	return min(max(retention/4, time.Second), time.Minute)
}

// Sweep erases, every Period(retention) until ctx ends, what is older
// than retention.
func Sweep(ctx context.Context, st *store.Store, retention time.Duration, logger *slog.Logger) {
	every := Period(retention)
	periodic.Every(ctx, every, every, func(ctx context.Context) {
		if err := Once(ctx, st, time.Now().Add(-retention)); err != nil && ctx.Err() == nil {
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
