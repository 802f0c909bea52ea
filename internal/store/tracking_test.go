package store_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestStatCountersAreFields(t *testing.T) {
	named := []store.StatCounter{store.StatAccepted, store.StatDelivered, store.StatDeferred, store.StatBounced,
		store.StatComplained, store.StatOpened, store.StatClicked, store.StatUnsubscribed}
	if !reflect.DeepEqual(named, store.StatCounters()) {
		t.Errorf("the named counters %v are not StatCounts' fields %v", named, store.StatCounters())
	}
	var sum store.StatCounts
	sum.Add(store.StatCounts{Opened: 2, Unsubscribed: 1})
	sum.Add(store.StatCounts{Opened: 1, Accepted: 4})
	if sum != (store.StatCounts{Opened: 3, Unsubscribed: 1, Accepted: 4}) {
		t.Errorf("Add: %+v", sum)
	}
}

func TestDomainTrackingAndRecordFive(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		id := newDomain(t, st, org, "shop.example", store.DomainVerified)
		d, err := st.DomainByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		on, name := true, "track.shop.example"
		rec := &store.DomainRecord{Purpose: "Tracking (CNAME)", Type: "CNAME", Name: name, Value: "t.mailyard.test"}
		if err := st.SetDomainTracking(ctx, d, store.TrackingSettings{Clicks: &on, CustomDomainSet: true, CustomDomain: &name, CustomRecord: rec}); err != nil {
			t.Fatal(err)
		}
		d, _ = st.DomainByID(ctx, id)
		if !d.TrackClicks || d.TrackOpens || d.TrackingDomain == nil || *d.TrackingDomain != name {
			t.Fatalf("settings not stored: %+v", d)
		}
		if status, _ := st.TrackingDomainStatus(ctx, id); status != store.RecordPending {
			t.Fatalf("record 5 status %q, want pending", status)
		}
		if ok, err := st.VerifiedTrackingDomain(ctx, name); ok || err != nil {
			t.Fatalf("a pending custom domain counts as verified (%v)", err)
		}
		// Its check does not hold the domain back: only records 1-4 count.
		if _, err := st.SaveChecks(ctx, id, []store.RecordCheck{{Position: store.TrackingRecordPosition, Status: store.RecordVerified}}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.VerifiedTrackingDomain(ctx, name); !ok || err != nil {
			t.Fatalf("a verified custom domain is refused (%v)", err)
		}
		// The same name again keeps the record and its status; null removes it.
		if err := st.SetDomainTracking(ctx, d, store.TrackingSettings{CustomDomainSet: true, CustomDomain: &name, CustomRecord: rec}); err != nil {
			t.Fatal(err)
		}
		if status, _ := st.TrackingDomainStatus(ctx, id); status != store.RecordVerified {
			t.Fatalf("status after setting the same name: %q", status)
		}
		for _, key := range []string{name, name + "+rsa", "other.example"} {
			if err := st.PutACMECacheEntry(ctx, key, []byte("sealed")); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SetDomainTracking(ctx, d, store.TrackingSettings{CustomDomainSet: true}); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]bool{name: false, name + "+rsa": false, "other.example": true} {
			if _, err := st.ACMECacheEntry(ctx, key); (err == nil) != want {
				t.Errorf("cache entry %s kept=%v after the custom domain was removed, want %v", key, err == nil, want)
			}
		}
		records, _ := st.DomainRecords(ctx, id)
		for _, r := range records {
			if r.Position == store.TrackingRecordPosition {
				t.Fatal("record 5 stays after the custom domain was removed")
			}
		}
		if ok, _ := st.VerifiedTrackingDomain(ctx, name); ok {
			t.Fatal("a removed custom domain is still served")
		}

		// Another organization's domain of the same name (which it may
		// add, and leave pending) that sets and removes the same custom
		// domain leaves the certificate of the one that serves it.
		if err := st.SetDomainTracking(ctx, d, store.TrackingSettings{CustomDomainSet: true, CustomDomain: &name, CustomRecord: rec}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutACMECacheEntry(ctx, name, []byte("sealed")); err != nil {
			t.Fatal(err)
		}
		rival, err := st.DomainByID(ctx, newDomain(t, st, newOrg(t, st, "rival"), "shop.example", store.DomainPending))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SetDomainTracking(ctx, rival, store.TrackingSettings{CustomDomainSet: true, CustomDomain: &name, CustomRecord: rec}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetDomainTracking(ctx, rival, store.TrackingSettings{CustomDomainSet: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ACMECacheEntry(ctx, name); err != nil {
			t.Fatalf("another organization's change removed the certificate: %v", err)
		}

		// Deleting the domain deletes its custom domain's certificates too.
		if err := st.PutACMECacheEntry(ctx, name+"+rsa", []byte("sealed")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DeleteDomainForCustomer(ctx, org, id); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{name, name + "+rsa"} {
			if _, err := st.ACMECacheEntry(ctx, key); err == nil {
				t.Errorf("cache entry %s kept after the domain was deleted", key)
			}
		}
	})
}

func TestEngagementLinksAndUnsubscribeSuppression(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		dom := newDomain(t, st, org, "shop.example", store.DomainVerified)
		e := &store.Email{ID: uuid.NewString(), OrganizationID: org, DomainID: dom, FromAddress: "a@shop.example",
			Subject: "hi", Source: store.SourceAPI, TrackClicks: true, TrackUnsubscribe: true}
		if err := st.CreateEmail(ctx, e, []string{"ada@x.example", "bob@x.example"}); err != nil {
			t.Fatal(err)
		}
		// A recipient's message is stored once. The lists for delivery say
		// which recipients have one, without it.
		if err := st.SaveRecipientMessage(ctx, e.ID, 1, []byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveRecipientMessage(ctx, e.ID, 1, []byte("two")); err != nil {
			t.Fatal(err)
		}
		if msg, err := st.RecipientMessage(ctx, e.ID, 1); err != nil || string(msg) != "one" {
			t.Fatalf("a second save replaced the message: %q, %v", msg, err)
		}
		if msg, err := st.RecipientMessage(ctx, e.ID, 0); err != nil || msg != nil {
			t.Fatalf("recipient 0's message %q, %v", msg, err)
		}
		if _, err := st.RecipientMessage(ctx, e.ID, 2); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a recipient the email does not have: %v", err)
		}
		for _, list := range []func(context.Context, string) ([]store.EmailRecipient, error){st.RecipientsForDelivery, st.PendingRecipients} {
			rs, err := list(ctx, e.ID)
			if err != nil || len(rs) != 2 || rs[0].HasMessage || !rs[1].HasMessage || rs[1].SignedMessage != nil || rs[1].Address != "bob@x.example" {
				t.Fatalf("recipients %+v, %v", rs, err)
			}
		}
		// The links of the first save stay.
		if err := st.SaveEmailLinks(ctx, e.ID, []string{"https://a.example/?x=1&y=2", "http://b.example"}); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveEmailLinks(ctx, e.ID, []string{"https://evil.example"}); err != nil {
			t.Fatal(err)
		}
		target, err := st.ClickTarget(ctx, e.ID, 0)
		if err != nil || target.URL != "https://a.example/?x=1&y=2" || target.TrackingDomain != nil {
			t.Fatalf("ClickTarget: %+v %v", target, err)
		}
		if _, err := st.ClickTarget(ctx, e.ID, 2); err == nil {
			t.Fatal("a link that was never stored was found")
		}

		at := time.Now().UTC().Truncate(time.Microsecond)
		for i, want := range []bool{true, false, false} {
			err := st.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				first, r, err := store.RecordEngagement(ctx, tx, e.ID, 0, store.EngagedOpen, at.Add(time.Duration(i)*time.Second))
				if err == nil && (first != want || r.Opens != i+1 || r.Address != "ada@x.example") {
					t.Errorf("open %d: first=%v opens=%d address=%s", i, first, r.Opens, r.Address)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := store.RecordEngagement(ctx, st.DB, e.ID, 7, store.EngagedClick, at); err == nil {
			t.Fatal("an engagement of a recipient the email does not have was recorded")
		}

		// An unsubscribe stops only the mail sent with unsubscribe on; a
		// hard bounce later replaces it (it stops everything).
		if err := store.Suppress(ctx, st.DB, org, "Ada@x.example", store.SuppressionUnsubscribe); err != nil {
			t.Fatal(err)
		}
		if among, _ := st.SuppressedAmong(ctx, org, []string{"ada@x.example"}, false); len(among) != 0 {
			t.Fatal("an unsubscribe stopped mail sent without unsubscribe")
		}
		if among, _ := st.SuppressedAmong(ctx, org, []string{"ada@x.example"}, true); !among["ada@x.example"] {
			t.Fatal("an unsubscribe did not stop mail sent with unsubscribe")
		}
		if err := store.Suppress(ctx, st.DB, org, "ada@x.example", store.SuppressionHardBounce); err != nil {
			t.Fatal(err)
		}
		if among, _ := st.SuppressedAmong(ctx, org, []string{"ada@x.example"}, false); !among["ada@x.example"] {
			t.Fatal("a hard bounce did not replace the unsubscribe")
		}
		if err := store.Suppress(ctx, st.DB, org, "ada@x.example", store.SuppressionUnsubscribe); err != nil {
			t.Fatal(err)
		}
		if among, _ := st.SuppressedAmong(ctx, org, []string{"ada@x.example"}, false); !among["ada@x.example"] {
			t.Fatal("an unsubscribe weakened a hard bounce")
		}

		// Erasure takes the recipients' messages too.
		if err := st.EraseEmailContent(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		if msg, err := st.RecipientMessage(ctx, e.ID, 1); err != nil || msg != nil {
			t.Fatalf("a recipient's message survived erasure: %q, %v", msg, err)
		}
		if _, err := st.ClickTarget(ctx, e.ID, 0); err != nil {
			t.Fatal("links must outlive the content: clicks come for as long as the mail is read")
		}
	})
}

// A check of record 5 made before the custom domain changed is not applied
// to the new record.
func TestStaleCheckOfReplacedRecord(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.SQLiteURL(t))
	org := newOrg(t, st, "acme")
	id := newDomain(t, st, org, "shop.example", store.DomainVerified)
	d, _ := st.DomainByID(ctx, id)
	for _, name := range []string{"old.shop.example", "new.shop.example"} {
		n := name
		if err := st.SetDomainTracking(ctx, d, store.TrackingSettings{CustomDomainSet: true, CustomDomain: &n,
			CustomRecord: &store.DomainRecord{Purpose: "Tracking (CNAME)", Type: "CNAME", Name: n, Value: "t.mailyard.test"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SaveChecks(ctx, id, []store.RecordCheck{{Position: store.TrackingRecordPosition, Name: "old.shop.example", Status: store.RecordVerified}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if status, _ := st.TrackingDomainStatus(ctx, id); status != store.RecordPending {
		t.Fatalf("the old name's check made the new record %s", status)
	}
}
