package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestWebhookDisableAndEnable(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		st := testenv.OpenStore(t, url)
		ctx := context.Background()
		org := newOrg(t, st, "acme")
		w := &store.Webhook{OrganizationID: org, URL: "https://a.example/h", EventTypes: store.EventTypes{"delivered"}}
		if err := st.CreateWebhook(ctx, w, 20, sealID); err != nil {
			t.Fatal(err)
		}
		pending, _ := newDeliveryID()
		if err := st.CreateDelivery(ctx, &store.Delivery{ID: pending, OrganizationID: org, WebhookID: w.ID, EventType: "delivered", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}

		// A patch of the URL and types leaves the status alone.
		url2 := "https://b.example/h"
		got, stopped, disabled, err := st.UpdateWebhook(ctx, org, w.ID, store.WebhookPatch{URL: &url2, EventTypes: store.EventTypes{"bounced", "webhook.disabled"}}, nil)
		if err != nil || disabled || len(stopped) != 0 || got.URL != url2 || !got.EventTypes.Has("webhook.disabled") || got.Status != store.WebhookEnabled {
			t.Fatalf("patch: %+v %v %v %v", got, stopped, disabled, err)
		}

		// Disabling stops pending deliveries and runs onDisable once, in the
		// transaction, with the new state.
		var seen []store.Webhook
		onDisable := func(ctx context.Context, tx bun.Tx, w *store.Webhook) error {
			seen = append(seen, *w)
			return nil
		}
		off := store.WebhookDisabled
		got, stopped, disabled, err = st.UpdateWebhook(ctx, org, w.ID, store.WebhookPatch{Status: &off}, onDisable)
		if err != nil || !disabled || len(stopped) != 1 || stopped[0] != pending || got.Status != store.WebhookDisabled ||
			*got.DisabledReason != store.DisabledManual || got.DisabledAt == nil || got.DisableCount != 1 {
			t.Fatalf("disable: %+v %v %v %v", got, stopped, disabled, err)
		}
		if len(seen) != 1 || seen[0].DisableCount != 1 || *seen[0].DisabledReason != store.DisabledManual {
			t.Fatalf("onDisable saw %+v", seen)
		}
		if d, _ := st.DeliveryOfWebhook(ctx, w.ID, pending); d.Status != store.DeliveryFailed {
			t.Fatalf("pending delivery is %s", d.Status)
		}
		// Disabling again changes nothing and announces nothing.
		if _, _, disabled, err = st.UpdateWebhook(ctx, org, w.ID, store.WebhookPatch{Status: &off}, onDisable); err != nil || disabled || len(seen) != 1 {
			t.Fatalf("second disable: %v %v %d", disabled, err, len(seen))
		}

		on := store.WebhookEnabled
		before := time.Now().UTC().Add(-time.Second)
		got, _, _, err = st.UpdateWebhook(ctx, org, w.ID, store.WebhookPatch{Status: &on}, onDisable)
		if err != nil || got.Status != store.WebhookEnabled || got.DisabledReason != nil || got.DisabledAt != nil || got.HealthyAt.Before(before) {
			t.Fatalf("enable: %+v %v", got, err)
		}

		// Another organization's webhook is not found.
		if _, _, _, err := st.UpdateWebhook(ctx, newOrg(t, st, "other"), w.ID, store.WebhookPatch{Status: &off}, nil); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("foreign update: %v", err)
		}
	})
}

func TestFinalFailureDisablesAfterTheFailureClock(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		st := testenv.OpenStore(t, url)
		ctx := context.Background()
		org := newOrg(t, st, "acme")
		w := &store.Webhook{OrganizationID: org, URL: "https://a.example/h", EventTypes: store.EventTypes{"delivered"},
			CreatedAt: time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)}
		if err := st.CreateWebhook(ctx, w, 20, sealID); err != nil {
			t.Fatal(err)
		}
		attempt := func(effect store.AttemptEffect) *store.Webhook {
			t.Helper()
			id, _ := newDeliveryID()
			if err := st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: org, WebhookID: w.ID, EventType: "delivered", Body: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			code := 500
			disabled, err := st.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: id, AttemptedAt: time.Now().UTC(), StatusCode: &code}, w.ID, effect, nil)
			if err != nil {
				t.Fatal(err)
			}
			return disabled
		}
		// Healthy 1 h ago; a clock of 2 h has not run out.
		if got := attempt(store.AttemptEffect{Status: store.DeliveryFailed, DisableIfUnhealthySince: time.Now().Add(-2 * time.Hour)}); got != nil {
			t.Fatalf("disabled too early: %+v", got)
		}
		// A clock of 30 min has.
		got := attempt(store.AttemptEffect{Status: store.DeliveryFailed, DisableIfUnhealthySince: time.Now().Add(-30 * time.Minute)})
		if got == nil || *got.DisabledReason != store.DisabledFailing || got.DisableCount != 1 {
			t.Fatalf("not disabled as failing: %+v", got)
		}
		// A 2xx restarts the clock.
		on := store.WebhookEnabled
		if _, _, _, err := st.UpdateWebhook(ctx, org, w.ID, store.WebhookPatch{Status: &on}, nil); err != nil {
			t.Fatal(err)
		}
		if got := attempt(store.AttemptEffect{Status: store.DeliveryFailed, DisableIfUnhealthySince: time.Now().Add(-30 * time.Minute)}); got != nil {
			t.Fatalf("re-enabling did not restart the clock: %+v", got)
		}
	})
}

// FailDomain closes only the window it is given (or an earlier one), on
// both databases: a window reopened since stays pending.
func TestFailDomainKeepsAReopenedWindow(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		id := newDomain(t, st, newOrg(t, st, "acme"), "x.example", store.DomainPending)
		d, err := st.DomainByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		first := d.WindowStartedAt
		if status, err := st.FailDomain(ctx, id, first); err != nil || status != store.DomainFailed {
			t.Fatalf("closing the first window: %s, %v", status, err)
		}
		second := first.Add(72*time.Hour + time.Microsecond)
		if err := st.ReopenDomain(ctx, id, second); err != nil {
			t.Fatal(err)
		}
		if status, err := st.FailDomain(ctx, id, first); err != nil || status != store.DomainPending {
			t.Fatalf("closing the first window again: %s, %v; want the second one pending", status, err)
		}
		if status, err := st.FailDomain(ctx, id, second); err != nil || status != store.DomainFailed {
			t.Fatalf("closing the second window: %s, %v", status, err)
		}
	})
}
