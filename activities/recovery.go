package activities

import (
	"context"
	"errors"

	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/recovery"
)

// Recovery are the recovery workflow's activities.
type Recovery struct {
	Store *store.Store
	Runs  *deliveryruns.Runs
}

// ListFailed returns the next page of the window's failed deliveries.
func (a *Recovery) ListFailed(ctx context.Context, in recovery.ListInput) (recovery.ListResult, error) {
	ids, err := a.Store.FailedDeliveryIDs(ctx, in.WebhookID, in.Since, in.Until, in.After, in.Limit)
	return recovery.ListResult{DeliveryIDs: ids}, err
}

// Redeliver reopens one failed delivery for this recovery and starts its new
// attempt series. Retried after a crash, it finds its own mark on the
// delivery and only makes sure the series it started runs: each delivery is
// redelivered once per recovery.
func (a *Recovery) Redeliver(ctx context.Context, in recovery.RedeliverInput) (recovery.RedeliverResult, error) {
	reopened, d, webhookStatus, err := a.Store.ReopenForRecovery(ctx, in.DeliveryID, in.RecoveryID)
	if errors.Is(err, store.ErrNotFound) {
		return recovery.RedeliverResult{}, nil
	}
	if err != nil {
		return recovery.RedeliverResult{}, err
	}
	if webhookStatus != store.WebhookEnabled {
		return recovery.RedeliverResult{WebhookGone: true}, nil
	}
	ours := d.RecoveryID != nil && *d.RecoveryID == in.RecoveryID
	switch {
	case reopened:
	case !ours:
		return recovery.RedeliverResult{}, nil // not failed (any more): nothing to recover
	case d.Status != store.DeliveryPending:
		return recovery.RedeliverResult{Redelivered: true}, nil // our series already ended
	}
	// Reopened now, or by an earlier try of this activity, which may have
	// stopped before starting the series, or before its start was
	// acknowledged; meanwhile a customer's retry may have started it. A run
	// of the delivery's current series is joined, whoever started it.
	return recovery.RedeliverResult{Redelivered: true}, a.Runs.StartForRecovery(ctx, d.ID, d.Series, in.RecoveryID)
}
