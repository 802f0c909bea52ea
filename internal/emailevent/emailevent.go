// Package emailevent records the events of an email, whatever found them
// (an SMTP attempt, a bounce or complaint by mail, an open, click or
// unsubscribe), in the one way every webhook and the statistics rely on.
package emailevent

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/webhook"
)

// Record stores an event of an email with one pending delivery per
// subscribed webhook of the email's organization, and counts it in the
// statistics (counter; "" counts nothing), in tx; an event_id seen before
// records and counts nothing and reports false. Every event of an email is
// recorded under an event_id that starts with store.EmailEventIDPrefix, so
// the steps that settle the email find and start its deliveries.
func Record(ctx context.Context, tx bun.IDB, e *store.Email, domain, eventID string, typ eventtype.Type,
	counter store.StatCounter, to string, at time.Time, data any) (bool, error) {
	body, err := webhook.BuildEnvelope(string(typ), at, data)
	if err != nil {
		return false, err
	}
	ev := &store.Event{
		EventID: eventID, Domain: domain, EventType: string(typ),
		OccurredAt: at, MessageID: e.ID, ToEmail: to, Subject: e.Subject,
	}
	return store.StageEmailEvent(ctx, tx, ev, e.OrganizationID, e.DomainID, counter, body, deliveryruns.NewDeliveryID)
}

// Settle marks the email sent once every recipient is final, and starts
// the webhook deliveries of its events that are not started yet: what every
// step that records an email's outcomes does last. Both are idempotent, so
// a step retried after a crash starts what the crash left unstarted.
func Settle(ctx context.Context, st *store.Store, runs *deliveryruns.Runs, emailID string) error {
	ids, err := st.SettleEmail(ctx, emailID)
	if err != nil || len(ids) == 0 {
		return err
	}
	return runs.StartFirst(ctx, ids)
}

// StartDeliveries starts the webhook deliveries of the email's events that
// are not started yet (idempotent: a step retried after a crash starts what
// the crash left).
func StartDeliveries(ctx context.Context, st *store.Store, runs *deliveryruns.Runs, emailID string) error {
	ids, err := st.PendingEmailDeliveries(ctx, emailID)
	if err != nil || len(ids) == 0 {
		return err
	}
	return runs.StartFirst(ctx, ids)
}
