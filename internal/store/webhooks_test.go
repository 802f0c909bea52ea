package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func newOrg(t *testing.T, st *store.Store, name string) int64 {
	t.Helper()
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(context.Background(), name, keyauth.WithSecret(secret, &store.APIKey{
		Label: "boot", Username: name, Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	return org.ID
}

func sealID(id int64) ([]byte, error) { return []byte(fmt.Sprintf("sealed-%d", id)), nil }

func newDeliveryID() (string, error) {
	id, err := uuid.NewV7()
	return id.String(), err
}

func TestWebhookLimitAndSecretBinding(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- st.CreateWebhook(ctx, &store.Webhook{OrganizationID: org, URL: "https://h.example/x", EventTypes: store.EventTypes{"delivered"}}, 5, sealID)
			}()
		}
		wg.Wait()
		close(errs)
		var ok, limited int
		for err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrLimitReached):
				limited++
			default:
				t.Fatal(err)
			}
		}
		if ok != 5 || limited != 3 {
			t.Fatalf("concurrent creates: %d created, %d limited; want 5 and 3", ok, limited)
		}
		hooks, _, err := st.ListWebhooks(ctx, org, store.Page{})
		if err != nil || len(hooks) != 5 {
			t.Fatalf("list %d %v", len(hooks), err)
		}
		for _, h := range hooks {
			if string(h.SecretEnc) != fmt.Sprintf("sealed-%d", h.ID) || h.Status != store.WebhookEnabled {
				t.Fatalf("webhook %+v", h)
			}
		}
		// A deleted webhook frees its place and disappears.
		if _, _, err := st.DeleteWebhook(ctx, org, hooks[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := st.WebhookInOrganization(ctx, org, hooks[0].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted webhook still found: %v", err)
		}
		if _, _, err := st.DeleteWebhook(ctx, org, hooks[0].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if err := st.CreateWebhook(ctx, &store.Webhook{OrganizationID: org, URL: "https://h.example/y", EventTypes: store.EventTypes{"opened"}}, 5, sealID); err != nil {
			t.Fatal(err)
		}
		other := newOrg(t, st, "other")
		if _, err := st.WebhookInOrganization(ctx, other, hooks[1].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("foreign webhook: %v", err)
		}
	})
}

func TestIngestFansOutOnceAndAttemptsFinishDeliveries(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		other := newOrg(t, st, "other")
		for i, d := range []store.Domain{
			{OrganizationID: org, Domain: "x.example", Status: store.DomainVerified},
			{OrganizationID: other, Domain: "x.example", Status: store.DomainPending},
		} {
			d.MailFromSubdomain, d.DKIMToken = "mail."+d.Domain, fmt.Sprintf("token%d", i)
			if err := st.CreateDomain(ctx, &d, nil); err != nil {
				t.Fatal(err)
			}
		}
		orgs, err := st.VerifiedDomainOrganizations(ctx, "x.example")
		if err != nil || len(orgs) != 1 || orgs[0].OrganizationID != org || orgs[0].DomainID == 0 {
			t.Fatalf("verified organizations %v %v", orgs, err)
		}
		subscribed := &store.Webhook{OrganizationID: org, URL: "https://a.example", EventTypes: store.EventTypes{"opened", "delivered"}}
		unsubscribed := &store.Webhook{OrganizationID: org, URL: "https://b.example", EventTypes: store.EventTypes{"bounced"}}
		foreign := &store.Webhook{OrganizationID: other, URL: "https://c.example", EventTypes: store.EventTypes{"delivered"}}
		for _, w := range []*store.Webhook{subscribed, unsubscribed, foreign} {
			if err := st.CreateWebhook(ctx, w, 20, sealID); err != nil {
				t.Fatal(err)
			}
		}

		ev := func() *store.Event {
			return &store.Event{EventID: "ev-1", Domain: "x.example", EventType: "delivered", OccurredAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), MessageID: "m", ToEmail: "ada@x.example", Subject: "Hi"}
		}
		first, created, err := st.IngestEvent(ctx, ev(), orgs, []byte(`{"b":1}`), newDeliveryID)
		if err != nil || !created || len(first) != 1 || first[0].WebhookID != subscribed.ID {
			t.Fatalf("first ingest %+v %v %v", first, created, err)
		}
		again, created, err := st.IngestEvent(ctx, ev(), orgs, []byte(`{"b":2}`), newDeliveryID)
		if err != nil || created || len(again) != 1 || again[0].ID != first[0].ID || again[0].Status != store.DeliveryPending {
			t.Fatalf("repeat ingest %+v %v %v", again, created, err)
		}

		id := first[0].ID
		d, w, err := st.DeliveryWithWebhook(ctx, id)
		if err != nil || string(d.Body) != `{"b":1}` || w.ID != subscribed.ID {
			t.Fatalf("delivery %+v %+v %v", d, w, err)
		}
		code := 500
		if _, err := st.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: id, AttemptedAt: time.Now().UTC(), StatusCode: &code, DurationMS: 3, ResponseBody: []byte("oops")}, w.ID, store.AttemptEffect{}, nil); err != nil {
			t.Fatal(err)
		}
		code2 := 410
		if _, err := st.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: id, AttemptedAt: time.Now().UTC(), StatusCode: &code2, DurationMS: 4}, w.ID, store.AttemptEffect{Status: store.DeliveryFailed, Disable: store.DisabledReceiverGone}, nil); err != nil {
			t.Fatal(err)
		}
		// A late success never overwrites the final status.
		if err := st.FinishDelivery(ctx, id, store.DeliveryDelivered); err != nil {
			t.Fatal(err)
		}
		list, _, err := st.ListDeliveries(ctx, w.ID, store.Page{Limit: 10})
		if err != nil || len(list) != 1 || list[0].Status != store.DeliveryFailed || list[0].FinishedAt == nil || list[0].Body != nil {
			t.Fatalf("list %+v %v", list, err)
		}
		attempts, err := st.AttemptsOf(ctx, []string{id, "00000000-0000-7000-8000-000000000000"}, 10)
		if log := attempts[id]; err != nil || len(attempts) != 1 || log.Total != 2 || len(log.Latest) != 2 ||
			*log.Latest[0].StatusCode != 500 || string(log.Latest[0].ResponseBody) != "oops" || *log.Latest[1].StatusCode != 410 {
			t.Fatalf("attempts %+v %v", attempts, err)
		}
		// A capped log keeps the latest attempts and counts them all.
		attempts, err = st.AttemptsOf(ctx, []string{id}, 1)
		if log := attempts[id]; err != nil || log.Total != 2 || len(log.Latest) != 1 || *log.Latest[0].StatusCode != 410 {
			t.Fatalf("capped attempts %+v %v", attempts, err)
		}
		hook, err := st.WebhookInOrganization(ctx, org, w.ID)
		if err != nil || hook.Status != store.WebhookDisabled || hook.DisabledReason == nil || *hook.DisabledReason != store.DisabledReceiverGone || hook.DisableCount != 1 || hook.DisabledAt == nil {
			t.Fatalf("webhook after 410: %+v %v", hook, err)
		}
		// A disabled webhook gets no new deliveries.
		e2 := ev()
		e2.EventID = "ev-2"
		none, _, err := st.IngestEvent(ctx, e2, orgs, []byte(`{}`), newDeliveryID)
		if err != nil || len(none) != 0 {
			t.Fatalf("ingest to a disabled webhook: %+v %v", none, err)
		}
		// Each reopen numbers a new series; a reopen of a pending
		// delivery changes nothing and answers the current number.
		if reopened, series, err := st.ReopenDelivery(ctx, id); err != nil || !reopened || series != 1 {
			t.Fatal(reopened, series, err)
		}
		if reopened, series, err := st.ReopenDelivery(ctx, id); err != nil || reopened || series != 1 {
			t.Fatal("a pending delivery reopened again", series, err)
		}
		if d, err := st.DeliveryOfWebhook(ctx, w.ID, id); err != nil || d.Status != store.DeliveryPending || d.FinishedAt != nil || d.Series != 1 {
			t.Fatalf("reopened %+v %v", d, err)
		}
		if err := st.FinishDelivery(ctx, id, store.DeliveryFailed); err != nil {
			t.Fatal(err)
		}
		if reopened, series, err := st.ReopenDelivery(ctx, id); err != nil || !reopened || series != 2 {
			t.Fatal("reopened again", reopened, series, err)
		}
		if _, _, err := st.ReopenDelivery(ctx, "00000000-0000-7000-8000-000000000000"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown delivery: %v", err)
		}
	})
}

func TestDeliveriesPageNewestFirstAndDeleteStopsPending(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		w := &store.Webhook{OrganizationID: org, URL: "https://a.example", EventTypes: store.EventTypes{"delivered"}}
		if err := st.CreateWebhook(ctx, w, 20, sealID); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for range 7 {
			id, _ := newDeliveryID()
			ids = append(ids, id)
			if err := st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: org, WebhookID: w.ID, EventType: "delivered", Body: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.FinishDelivery(ctx, ids[0], store.DeliveryDelivered); err != nil {
			t.Fatal(err)
		}
		var seen []string
		var after any
		for {
			page, more, err := st.ListDeliveries(ctx, w.ID, store.Page{Limit: 3, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range page {
				seen = append(seen, d.ID)
			}
			if !more {
				break
			}
			after = page[len(page)-1].ID
		}
		if len(seen) != 7 {
			t.Fatalf("paged %d deliveries", len(seen))
		}
		for i := range seen {
			if seen[i] != ids[len(ids)-1-i] {
				t.Fatalf("order %v, want reverse of %v", seen, ids)
			}
		}
		_, stopped, err := st.DeleteWebhook(ctx, org, w.ID)
		if err != nil || len(stopped) != 6 {
			t.Fatalf("delete stopped %d (%v)", len(stopped), err)
		}
		left, _, _ := st.ListDeliveries(ctx, w.ID, store.Page{Limit: 10})
		for _, d := range left {
			want := store.DeliveryFailed
			if d.ID == ids[0] {
				want = store.DeliveryDelivered
			}
			if d.Status != want {
				t.Fatalf("delivery %s is %s, want %s", d.ID, d.Status, want)
			}
		}
	})
}
