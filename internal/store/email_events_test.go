package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// An email's outcome event is stored with a delivery per subscribed,
// enabled webhook of its organization and counted once, however often the
// step that records it runs; on PostgreSQL that is one statement, on SQLite
// several, and both must answer the same.
func TestStageEmailEventFansOutAndCountsOnce(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		other := newOrg(t, st, "other")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		newDomain(t, st, other, "x.example", store.DomainVerified)
		hooks := map[string]*store.Webhook{
			"subscribed":   {OrganizationID: org, URL: "https://a.example", EventTypes: store.EventTypes{"opened", "delivered"}},
			"also":         {OrganizationID: org, URL: "https://b.example", EventTypes: store.EventTypes{"delivered"}},
			"unsubscribed": {OrganizationID: org, URL: "https://c.example", EventTypes: store.EventTypes{"bounced"}},
			"disabled":     {OrganizationID: org, URL: "https://d.example", EventTypes: store.EventTypes{"delivered"}},
			"foreign":      {OrganizationID: other, URL: "https://e.example", EventTypes: store.EventTypes{"delivered"}},
		}
		for _, w := range hooks {
			if err := st.CreateWebhook(ctx, w, 20, sealID); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.DB.NewUpdate().Model((*store.Webhook)(nil)).Set("status = ?", store.WebhookDisabled).
			Where("id = ?", hooks["disabled"].ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 11, 21, 23, 30, 0, 0, time.FixedZone("-01", -3600)) // 2026-11-22 in UTC
		stage := func(eventID, typ string, counter store.StatCounter) (*store.Event, bool) {
			t.Helper()
			ev := &store.Event{EventID: eventID, Domain: "x.example", EventType: typ, OccurredAt: at, MessageID: "m", ToEmail: "ada@r.example", Subject: "Hi"}
			var created bool
			err := st.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				var err error
				created, err = store.StageEmailEvent(ctx, tx, ev, org, domain, counter, []byte(`{"b":1}`), newDeliveryID)
				return err
			})
			if err != nil {
				t.Fatalf("stage %s: %v", eventID, err)
			}
			return ev, created
		}
		deliveriesOf := func(ev *store.Event) map[int64]bool {
			t.Helper()
			var rows []store.Delivery
			if err := st.DB.NewSelect().Model(&rows).Where("event_id = ?", ev.ID).Scan(ctx); err != nil {
				t.Fatal(err)
			}
			got := map[int64]bool{}
			for _, d := range rows {
				if d.Status != store.DeliveryPending || string(d.Body) != `{"b":1}` || d.EventType != ev.EventType {
					t.Errorf("delivery %+v", d)
				}
				got[d.WebhookID] = true
			}
			return got
		}

		id := uuid.NewString()
		ev, created := stage(id+":0", "delivered", store.StatDelivered)
		if !created || ev.ID == 0 {
			t.Fatalf("first stage: created %v, id %d", created, ev.ID)
		}
		want := map[int64]bool{hooks["subscribed"].ID: true, hooks["also"].ID: true}
		if got := deliveriesOf(ev); len(got) != len(want) || !got[hooks["subscribed"].ID] || !got[hooks["also"].ID] {
			t.Fatalf("deliveries to webhooks %v, want %v", got, want)
		}
		if _, created := stage(id+":0", "delivered", store.StatDelivered); created {
			t.Fatal("a repeat of the event was created again")
		}
		if got := deliveriesOf(ev); len(got) != 2 {
			t.Fatalf("a repeat added deliveries: %v", got)
		}
		if s := statsOn(t, st, org, &domain, "2026-11-22"); s.Delivered != 1 {
			t.Fatalf("stats after a repeat: %+v, want delivered 1", s)
		}

		// An event without a counter counts nothing; one no webhook
		// subscribes to is stored without deliveries.
		if _, created := stage(id+":open", "opened", ""); !created {
			t.Fatal("uncounted event not created")
		}
		clicked, created := stage(id+":click", "clicked", store.StatClicked)
		if !created || len(deliveriesOf(clicked)) != 0 {
			t.Fatalf("clicked: created %v, deliveries %v", created, deliveriesOf(clicked))
		}
		if s := statsOn(t, st, org, &domain, "2026-11-22"); s != (store.StatCounts{Delivered: 1, Clicked: 1}) {
			t.Fatalf("stats %+v, want delivered 1 and clicked 1", s)
		}
	})
}
