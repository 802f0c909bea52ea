package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// failedInWindow selects a webhook's failed deliveries created in
// [since, until].
func failedInWindow(q *bun.SelectQuery, webhookID int64, since, until time.Time) *bun.SelectQuery {
	return q.Where("webhook_id = ?", webhookID).Where("status = ?", DeliveryFailed).
		Where("created_at >= ?", since.UTC()).Where("created_at <= ?", until.UTC())
}

// CountFailedDeliveries counts a webhook's failed deliveries created in
// [since, until].
func (s *Store) CountFailedDeliveries(ctx context.Context, webhookID int64, since, until time.Time) (int, error) {
	n, err := failedInWindow(s.DB.NewSelect().Model((*Delivery)(nil)), webhookID, since, until).Count(ctx)
	return int(n), err
}

// FailedDeliveryIDs returns up to limit ids of a webhook's failed deliveries
// created in [since, until], oldest first, after the id after ("" for the
// first page). Ids are UUIDv7, so their order is their creation order.
func (s *Store) FailedDeliveryIDs(ctx context.Context, webhookID int64, since, until time.Time, after string, limit int) ([]string, error) {
	ids := []string{}
	q := failedInWindow(s.DB.NewSelect().Model((*Delivery)(nil)).Column("id"), webhookID, since, until).
		OrderExpr("id").Limit(int64(limit))
	if after != "" {
		q = q.Where("id > ?", after)
	}
	return ids, q.Scan(ctx, &ids)
}

// ReopenForRecovery makes a failed delivery pending again on behalf of a
// recovery and marks it with the recovery's id; it reports false, changing
// nothing, if the delivery is not failed or this recovery reopened it
// before. It also returns the delivery (without its body) and its webhook's
// status as they are afterwards.
func (s *Store) ReopenForRecovery(ctx context.Context, id, recoveryID string) (reopened bool, d *Delivery, webhookStatus string, err error) {
	err = s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		d = new(Delivery)
		if err := tx.NewSelect().Model(d).ExcludeColumn("body").Relation("Webhook").Where("delivery.id = ?", id).Scan(ctx); err != nil {
			return notFound(err, "delivery")
		}
		webhookStatus = d.Webhook.Status
		reopened = false
		if webhookStatus != WebhookEnabled || d.Status != DeliveryFailed || (d.RecoveryID != nil && *d.RecoveryID == recoveryID) {
			return nil
		}
		var series []int64
		err := tx.NewUpdate().Model((*Delivery)(nil)).
			Set("status = ?", DeliveryPending).Set("finished_at = NULL").Set("recovery_id = ?", recoveryID).Set("series = series + 1").
			Where("id = ?", id).Where("status = ?", DeliveryFailed).
			Returning("series").Scan(ctx, &series)
		if err != nil {
			return err
		}
		reopened = len(series) == 1
		if reopened {
			d.Status, d.FinishedAt, d.RecoveryID, d.Series = DeliveryPending, nil, &recoveryID, series[0]
		}
		return nil
	})
	return reopened, d, webhookStatus, err
}
