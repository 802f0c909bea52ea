package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// PlatformEvent is an event Mailyard emits itself (domain.*,
// webhook.disabled) for one organization. Its body, with the data, is stored
// in its deliveries.
type PlatformEvent struct {
	bun.BaseModel `bun:"table:platform_events"`

	ID             int64     `bun:"id,pk,autoincrement"`
	EventKey       string    `bun:"event_key,notnull"`
	OrganizationID int64     `bun:"organization_id,notnull"`
	EventType      string    `bun:"event_type,notnull"`
	OccurredAt     time.Time `bun:"occurred_at,notnull"`
	CreatedAt      time.Time `bun:"created_at,notnull"`
}

// StorePlatformEvent stores a platform event and one pending delivery,
// carrying body, per enabled webhook of its organization that subscribes to
// its type, except the webhook exceptWebhookID (0: none). It is idempotent on
// EventKey: for a key seen before it creates nothing and returns the
// deliveries made the first time, with created false. db is the store's
// database or a transaction the event must commit with. The deliveries'
// foreign keys take KEY SHARE on their webhooks' rows, which a concurrent
// disable of another webhook of the organization may hold locked (and wait,
// in turn, for this transaction's webhook): webhooks are therefore locked
// FOR NO KEY UPDATE, which KEY SHARE does not wait for, never FOR UPDATE.
func StorePlatformEvent(ctx context.Context, db bun.IDB, ev *PlatformEvent, body []byte, exceptWebhookID int64, newID func() (string, error)) (deliveries []Delivery, created bool, err error) {
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = now()
	}
	res, err := db.NewInsert().Model(ev).On("CONFLICT (event_key) DO NOTHING").Returning("id").Exec(ctx)
	if err != nil {
		return nil, false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if err := db.NewSelect().Model(ev).Where("event_key = ?", ev.EventKey).Scan(ctx); err != nil {
			return nil, false, err
		}
		err := db.NewSelect().Model(&deliveries).ExcludeColumn("body").
			Where("platform_event_id = ?", ev.ID).OrderExpr("id").Scan(ctx)
		return deliveries, false, err
	}
	var hooks []Webhook
	if err := db.NewSelect().Model(&hooks).Column("id", "organization_id", "event_types").
		Where("organization_id = ?", ev.OrganizationID).Where("status = ?", WebhookEnabled).
		Where("id <> ?", exceptWebhookID).
		OrderExpr("id").Scan(ctx); err != nil {
		return nil, false, err
	}
	for _, h := range hooks {
		if !h.EventTypes.Has(ev.EventType) {
			continue
		}
		id, err := newID()
		if err != nil {
			return nil, false, err
		}
		deliveries = append(deliveries, Delivery{
			ID: id, OrganizationID: h.OrganizationID, WebhookID: h.ID, PlatformEventID: &ev.ID,
			EventType: ev.EventType, Body: body, Status: DeliveryPending, CreatedAt: ev.CreatedAt,
		})
	}
	if len(deliveries) > 0 {
		if _, err := db.NewInsert().Model(&deliveries).Exec(ctx); err != nil {
			return nil, false, err
		}
	}
	return deliveries, true, nil
}
