package store

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"
)

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// Delivery is one event on its way to one webhook. Body is built once and
// sent byte for byte by every attempt.
type Delivery struct {
	bun.BaseModel `bun:"table:deliveries"`

	ID             string `bun:"id,pk"`
	OrganizationID int64  `bun:"organization_id,notnull"`
	WebhookID      int64  `bun:"webhook_id,notnull"`
	EventID        *int64 `bun:"event_id"`
	// PlatformEventID is set instead of EventID for a platform event; both
	// nil means a test event.
	PlatformEventID *int64 `bun:"platform_event_id"`
	// RecoveryID names the recovery that last reopened the delivery.
	RecoveryID *string `bun:"recovery_id"`
	// Series counts the delivery's reopens: the number of its current
	// attempt series, which that series' run carries (deliveryruns).
	Series     int64      `bun:"series,notnull"`
	EventType  string     `bun:"event_type,notnull"`
	Body       []byte     `bun:"body,notnull"`
	Status     string     `bun:"status,notnull"`
	CreatedAt  time.Time  `bun:"created_at,notnull"`
	FinishedAt *time.Time `bun:"finished_at"`

	// Webhook is loaded with the delivery in one query by DeliveryWithWebhook.
	Webhook *Webhook `bun:"rel:belongs-to,join:webhook_id=id"`
	// PreviousSecretCount is how many unexpired previous secrets the
	// webhook has, read by DeliveryWithWebhook.
	PreviousSecretCount int `bun:"previous_secret_count,scanonly"`
}

// DeliveryAttempt is one POST as the delivery log shows it.
type DeliveryAttempt struct {
	bun.BaseModel `bun:"table:delivery_attempts"`

	ID                int64     `bun:"id,pk,autoincrement"`
	DeliveryID        string    `bun:"delivery_id,notnull"`
	AttemptedAt       time.Time `bun:"attempted_at,notnull"`
	StatusCode        *int      `bun:"status_code"`
	Error             *string   `bun:"error"`
	DurationMS        int64     `bun:"duration_ms,notnull"`
	ResponseBody      []byte    `bun:"response_body"`
	ResponseTruncated bool      `bun:"response_truncated,notnull"`
}

// CreateDelivery inserts a delivery that belongs to no ingested event (a test
// event sent from the API).
func (s *Store) CreateDelivery(ctx context.Context, d *Delivery) error {
	if d.CreatedAt.IsZero() {
		d.CreatedAt = now()
	}
	if d.Status == "" {
		d.Status = DeliveryPending
	}
	_, err := s.DB.NewInsert().Model(d).Exec(ctx)
	return err
}

// DeliveryWithWebhook reads a delivery, body included, and its webhook (in
// any status) for the delivery activity, and counts the webhook's unexpired
// previous secrets (PreviousSecretCount), so that the attempt reads them only
// while a rotation is in its overlap.
func (s *Store) DeliveryWithWebhook(ctx context.Context, id string) (*Delivery, *Webhook, error) {
	// One round trip per attempt: the join instead of three look-ups.
	d := new(Delivery)
	if err := s.DB.NewSelect().Model(d).ColumnExpr("delivery.*").
		ColumnExpr("(SELECT count(*) FROM webhook_previous_secrets AS p WHERE p.webhook_id = delivery.webhook_id AND p.expires_at > ?) AS previous_secret_count", now()).
		Relation("Webhook").Where("delivery.id = ?", id).Scan(ctx); err != nil {
		return nil, nil, notFound(err, "delivery")
	}
	return d, d.Webhook, nil
}

// AttemptEffect is what an attempt changes beside being logged.
type AttemptEffect struct {
	// Status finishes a pending delivery (delivered or failed); "" leaves it
	// pending for the next attempt.
	Status string
	// Disable turns an enabled webhook off with this reason (its receiver
	// said 410: receiver_gone); "" leaves it on.
	Disable string
	// DisableIfUnhealthySince turns an enabled webhook off with reason
	// failing if it has had no 2xx answer since this time (the delivery ran
	// out of its schedule); zero never does.
	DisableIfUnhealthySince time.Time
	// Healthy restarts the webhook's failure clock (a 2xx answer).
	Healthy bool
	// HealthyAt is the webhook's healthy_at as the attempt read it: when it
	// is recent enough that Healthy would not rewrite it, the update is
	// skipped (the column only moves forward).
	HealthyAt time.Time
}

// simple reports whether the effect can disable nothing: the attempt is then
// recorded without a transaction where the database allows (recordSimple).
func (e AttemptEffect) simple() bool {
	return e.Disable == "" && e.DisableIfUnhealthySince.IsZero()
}

// healthyResolution bounds how often a stream of 2xx answers rewrites the
// webhook's row: the failure clock counts days, not seconds.
const healthyResolution = time.Minute

// RecordAttempt logs an attempt and applies its effect in one transaction.
// The status change is guarded by status = 'pending', so an attempt that
// raced a delete or a finished series never overwrites the final status.
// When the effect disables the webhook, onDisable runs in the transaction and
// the disabled webhook is returned; otherwise the webhook is nil.
//
// An attempt that can disable nothing takes one round trip on PostgreSQL: one
// statement, whose data-modifying WITH clauses are as atomic as the
// transaction (README, "Delivery attempts").
//
// Lock order on PostgreSQL: a webhook's row before any of its deliveries',
// in every transaction that may disable or delete it (DeleteWebhook,
// UpdateWebhook, this one) and in recordSimple. Disabling fails every
// pending delivery of the webhook; an attempt that locked its own delivery
// first and then waited for the webhook would deadlock with it.
func (s *Store) RecordAttempt(ctx context.Context, a *DeliveryAttempt, webhookID int64, effect AttemptEffect, onDisable OnDisable) (disabled *Webhook, err error) {
	at := now()
	healthy := effect.Healthy && effect.HealthyAt.Before(at.Add(-healthyResolution))
	if effect.simple() && (s.IsPostgres() || effect.Status == "" && !healthy) {
		return nil, s.recordSimple(ctx, a, webhookID, effect.Status, healthy, at)
	}
	err = s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		disabled = nil
		if s.IsPostgres() {
			// Only an attempt that may disable the webhook gets here on
			// PostgreSQL: it locks the webhook first (lock order above).
			// NO KEY UPDATE, as any UPDATE takes, leaves the foreign key
			// checks of deliveries inserted for the webhook (KEY SHARE)
			// alone. SQLite's immediate transactions serialise writers.
			if _, err := tx.ExecContext(ctx, "SELECT 1 FROM webhooks WHERE id = ? FOR NO KEY UPDATE", webhookID); err != nil {
				return err
			}
		}
		if _, err := tx.NewInsert().Model(a).Returning("id").Exec(ctx); err != nil {
			return err
		}
		if effect.Status != "" {
			if err := finishDelivery(ctx, tx, a.DeliveryID, effect.Status, at); err != nil {
				return err
			}
		}
		if healthy {
			if _, err := tx.NewUpdate().Model((*Webhook)(nil)).Set("healthy_at = ?", at).
				Where("id = ?", webhookID).Where("healthy_at < ?", at.Add(-healthyResolution)).
				Exec(ctx); err != nil {
				return err
			}
		}
		reason := effect.Disable
		if reason == "" && !effect.DisableIfUnhealthySince.IsZero() {
			n, err := tx.NewSelect().Model((*Webhook)(nil)).
				Where("id = ?", webhookID).Where("status = ?", WebhookEnabled).
				Where("healthy_at <= ?", effect.DisableIfUnhealthySince.UTC()).
				Count(ctx)
			if err != nil {
				return err
			}
			if n > 0 {
				reason = DisabledFailing
			}
		}
		if reason == "" {
			return nil
		}
		w := &Webhook{ID: webhookID}
		if _, err := disableWebhook(ctx, tx, w, reason, at); errors.Is(err, ErrConflict) {
			return nil // already disabled or deleted: nothing to announce
		} else if err != nil {
			return err
		}
		disabled = w
		if onDisable != nil {
			return onDisable(ctx, tx, w)
		}
		return nil
	})
	return disabled, err
}

// recordSimple logs an attempt, finishes the delivery (status, unless "")
// and restarts the webhook's failure clock (healthy) in one statement. Only
// PostgreSQL runs data-modifying WITH clauses; on SQLite it is called only
// for the insert alone.
func (s *Store) recordSimple(ctx context.Context, a *DeliveryAttempt, webhookID int64, status string, healthy bool, at time.Time) error {
	insert := s.DB.NewInsert().Model(a).Returning("id")
	if status == "" && !healthy {
		_, err := insert.Exec(ctx)
		return err
	}
	q := s.DB.NewSelect().With("attempt", insert)
	if healthy {
		q = q.With("healthy", s.DB.NewUpdate().Model((*Webhook)(nil)).Set("healthy_at = ?", at).
			Where("id = ?", webhookID).Where("healthy_at < ?", at.Add(-healthyResolution)).
			Returning("1"))
	}
	if status != "" {
		finish := s.DB.NewUpdate().Model((*Delivery)(nil)).
			Set("status = ?", status).Set("finished_at = ?", at).
			Where("id = ?", a.DeliveryID).Where("status = ?", DeliveryPending)
		if healthy {
			// The order of sibling WITH clauses is unspecified: reading
			// healthy makes its update, and the webhook's row lock, come
			// before the delivery's (lock order: RecordAttempt).
			finish = finish.Where("(SELECT count(*) FROM healthy) >= 0")
		}
		q = q.With("finished", finish)
	}
	return q.TableExpr("attempt").Column("id").Scan(ctx, &a.ID)
}

// FinishDelivery moves a pending delivery to a final status; it does nothing
// to a delivery that is already final.
func (s *Store) FinishDelivery(ctx context.Context, id, status string) error {
	return finishDelivery(ctx, s.DB, id, status, now())
}

func finishDelivery(ctx context.Context, db bun.IDB, id, status string, at time.Time) error {
	_, err := db.NewUpdate().Model((*Delivery)(nil)).
		Set("status = ?", status).Set("finished_at = ?", at).
		Where("id = ?", id).Where("status = ?", DeliveryPending).
		Exec(ctx)
	return err
}

// ReopenDelivery makes a final (delivered or failed) delivery pending again
// for a new attempt series, and returns that series' number. It reports
// false, changing nothing, for a delivery that is pending already (of two
// concurrent retries one reopens), with the number of its current series.
func (s *Store) ReopenDelivery(ctx context.Context, id string) (reopened bool, series int64, err error) {
	var rows []int64
	err = s.DB.NewUpdate().Model((*Delivery)(nil)).
		Set("status = ?", DeliveryPending).Set("finished_at = NULL").Set("series = series + 1").
		Where("id = ?", id).Where("status IN (?)", bun.List([]string{DeliveryDelivered, DeliveryFailed})).
		Returning("series").Scan(ctx, &rows)
	if err != nil {
		return false, 0, err
	}
	if len(rows) == 1 {
		return true, rows[0], nil
	}
	err = s.DB.NewSelect().Model((*Delivery)(nil)).Column("series").Where("id = ?", id).Scan(ctx, &series)
	return false, series, notFound(err, "delivery")
}

// DeliveryFailed reports whether a delivery is failed (false for a missing
// one).
func (s *Store) DeliveryFailed(ctx context.Context, id string) (bool, error) {
	return s.DB.NewSelect().Model((*Delivery)(nil)).Where("id = ?", id).Where("status = ?", DeliveryFailed).Exists(ctx)
}

// DeliveryOfWebhook reads a delivery (without its body) only if it belongs to
// the webhook.
func (s *Store) DeliveryOfWebhook(ctx context.Context, webhookID int64, id string) (*Delivery, error) {
	d := new(Delivery)
	err := s.DB.NewSelect().Model(d).ExcludeColumn("body").
		Where("id = ?", id).Where("webhook_id = ?", webhookID).
		Scan(ctx)
	return d, notFound(err, "delivery")
}

// DeleteUnattemptedDelivery removes a delivery of which no attempt was made
// (a test event whose series could not start), and reports whether it did.
func (s *Store) DeleteUnattemptedDelivery(ctx context.Context, id string) (bool, error) {
	res, err := s.DB.NewDelete().Model((*Delivery)(nil)).Where("id = ?", id).
		Where("NOT EXISTS (SELECT 1 FROM delivery_attempts WHERE delivery_id = ?)", id).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// ListDeliveries returns a page of a webhook's deliveries, newest first, and
// whether more follow. Ids are UUIDv7, so their order is their creation order;
// Page.After is a delivery id (a lower-case UUID string).
func (s *Store) ListDeliveries(ctx context.Context, webhookID int64, page Page) ([]Delivery, bool, error) {
	ds := []Delivery{}
	q := s.DB.NewSelect().Model(&ds).ExcludeColumn("body").
		Where("webhook_id = ?", webhookID)
	more, err := scanPage(ctx, q, &ds, "id", Descending, page)
	return ds, more, err
}

// AttemptLog is what a delivery's log shows of its attempts: the latest
// ones, oldest first, and how many were made in all.
type AttemptLog struct {
	Latest []DeliveryAttempt
	Total  int
}

// AttemptsOf returns, by delivery id, each delivery's latest attempts (at
// most latest of them) and its count of attempts. Every retry or recovery of
// a delivery adds a series of attempts, so a log that showed them all would
// grow without end.
func (s *Store) AttemptsOf(ctx context.Context, deliveryIDs []string, latest int) (map[string]AttemptLog, error) {
	out := map[string]AttemptLog{}
	if len(deliveryIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		DeliveryAttempt
		Total int `bun:"total"`
	}
	if err := s.DB.NewRaw(`SELECT id, delivery_id, attempted_at, status_code, error, duration_ms,
			response_body, response_truncated, total
		FROM (SELECT a.*, ROW_NUMBER() OVER (PARTITION BY delivery_id ORDER BY id DESC) AS newest,
				COUNT(*) OVER (PARTITION BY delivery_id) AS total
			FROM delivery_attempts AS a WHERE delivery_id IN (?)) AS ranked
		WHERE newest <= ? ORDER BY id`, bun.List(deliveryIDs), latest).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	for _, r := range rows {
		log := out[r.DeliveryID]
		log.Latest, log.Total = append(log.Latest, r.DeliveryAttempt), r.Total
		out[r.DeliveryID] = log
	}
	return out, nil
}

// DeliveryOwner is whose a delivery is: its organization and webhook.
type DeliveryOwner struct {
	ID             string `bun:"id"`
	OrganizationID int64  `bun:"organization_id"`
	WebhookID      int64  `bun:"webhook_id"`
	// Series is the delivery's current attempt series (Delivery.Series).
	Series int64 `bun:"series"`
}

// DeliveryOwners reads the owners of deliveries, by delivery id; unknown ids
// are left out.
func (s *Store) DeliveryOwners(ctx context.Context, ids []string) (map[string]DeliveryOwner, error) {
	out := make(map[string]DeliveryOwner, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var rows []DeliveryOwner
	if err := s.DB.NewSelect().Model((*Delivery)(nil)).Column("id", "organization_id", "webhook_id", "series").
		Where("id IN (?)", bun.List(ids)).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.ID] = r
	}
	return out, nil
}
