// Package platformevents emits Mailyard's own events (domain.*,
// webhook.disabled) to the webhooks that subscribe to them, through the same
// deliveries, body envelope, signatures and retries as email events.
//
// It runs in-process, inside activities and API handlers: nothing about an
// event crosses Temporal but the delivery ids of the workflows it starts.
package platformevents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/webhook"
)

// Event is one platform event.
type Event struct {
	// Key makes emission idempotent: it is unique per transition (e.g.
	// "domain.verified:42:1"), so an activity that is retried, or a caller
	// that emits again after a crash, creates nothing new.
	Key            string
	Type           eventtype.Type
	OrganizationID int64
	OccurredAt     time.Time
	// Data is marshalled into the body's data object.
	Data any
	// ExceptWebhookID leaves one webhook out (webhook.disabled goes to the
	// organization's other webhooks); 0 leaves none out.
	ExceptWebhookID int64
}

// Emitter stores platform events with their deliveries and starts the
// delivery workflows.
type Emitter struct {
	Store *store.Store
	Runs  *deliveryruns.Runs
}

// Emit stores the event once, with one pending delivery per enabled webhook
// of the organization that subscribes to its type (one transaction), then
// starts the delivery workflows. Repeating it with the same Key creates
// nothing and starts only the workflows still missing; running ones are
// reused and finished ones are not started again. An error after the event
// is stored means some workflows may be missing: emit again.
func (e *Emitter) Emit(ctx context.Context, ev Event) error {
	var pending []string
	err := e.Store.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		pending, err = e.Stage(ctx, tx, ev)
		return err
	})
	if err != nil {
		return err
	}
	return e.Start(ctx, pending)
}

// Stage stores the event and its deliveries in db (typically a transaction
// that also records the change the event announces, so that neither commits
// without the other) and returns the ids of the deliveries still pending.
// Start them with Start once db has committed.
func (e *Emitter) Stage(ctx context.Context, db bun.IDB, ev Event) ([]string, error) {
	if ev.Key == "" {
		return nil, errors.New("platform event without a key")
	}
	if !ev.Type.Valid() || ev.Type.IsEmail() {
		return nil, fmt.Errorf("platform event %s: %q is not a platform event type", ev.Key, ev.Type)
	}
	if ev.OccurredAt.IsZero() {
		ev.OccurredAt = time.Now()
	}
	occurred := ev.OccurredAt.UTC().Truncate(time.Microsecond)
	// Built once: every delivery and every retry sends these bytes.
	body, err := webhook.BuildEnvelope(string(ev.Type), occurred, ev.Data)
	if err != nil {
		return nil, fmt.Errorf("platform event %s: %w", ev.Key, err)
	}
	row := &store.PlatformEvent{EventKey: ev.Key, OrganizationID: ev.OrganizationID, EventType: string(ev.Type), OccurredAt: occurred}
	deliveries, _, err := store.StorePlatformEvent(ctx, db, row, body, ev.ExceptWebhookID, deliveryruns.NewDeliveryID)
	if err != nil {
		return nil, err
	}
	return deliveryruns.PendingIDs(deliveries), nil
}

// Start starts the delivery workflows of staged deliveries (idempotently).
func (e *Emitter) Start(ctx context.Context, deliveryIDs []string) error {
	return e.Runs.StartFirst(ctx, deliveryIDs)
}

// WebhookDisabled is the webhook.disabled event of a webhook's latest
// disable (w as the disabling transaction left it). Its key counts the
// webhook's disables, so each disable is announced exactly once however often
// it is emitted, and the next disable is announced again.
func WebhookDisabled(w *store.Webhook) Event {
	reason := ""
	if w.DisabledReason != nil {
		reason = *w.DisabledReason
	}
	at := time.Now()
	if w.DisabledAt != nil {
		at = *w.DisabledAt
	}
	return Event{
		Key:  fmt.Sprintf("webhook.disabled:%d:%d", w.ID, w.DisableCount),
		Type: eventtype.WebhookDisabled, OrganizationID: w.OrganizationID, OccurredAt: at,
		Data:            webhookDisabledData{WebhookID: w.ID, Reason: reason},
		ExceptWebhookID: w.ID,
	}
}

type webhookDisabledData struct {
	WebhookID int64  `json:"webhook_id"`
	Reason    string `json:"reason"`
}

// StageDisable is a store.OnDisable that stages the webhook.disabled event
// in the disabling transaction; it adds the ids to start to *pending.
func (e *Emitter) StageDisable(pending *[]string) store.OnDisable {
	return func(ctx context.Context, tx bun.Tx, w *store.Webhook) error {
		ids, err := e.Stage(ctx, tx, WebhookDisabled(w))
		*pending = append(*pending, ids...)
		return err
	}
}
