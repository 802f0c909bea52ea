package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func newDomain(t *testing.T, st *store.Store, org int64, name, status string) int64 {
	t.Helper()
	d := &store.Domain{OrganizationID: org, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: fmt.Sprintf("tok-%d-%s", org, name), Status: status}
	if err := st.CreateDomain(context.Background(), d, nil); err != nil {
		t.Fatal(err)
	}
	return d.ID
}

func day(s string) time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return d
}

// statsOn reads one day's counters.
func statsOn(t *testing.T, st *store.Store, org int64, domain *int64, d string) store.StatCounts {
	t.Helper()
	days, err := st.Stats(context.Background(), org, domain, day(d), day(d))
	if err != nil || len(days) != 1 {
		t.Fatalf("stats of %s: %v %v", d, days, err)
	}
	return days[0].StatCounts
}

// Twenty writers increment one day's counters at once, each in its own
// transaction as the event recorders do, several times per transaction (an
// email's outcomes are recorded together): no increment is lost, no
// transaction deadlocks with another, and the day stays within its shards.
func TestCountEmailEventConcurrentIncrementsAreExact(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		// The same UTC day seen from two time zones: 20:00Z and 01:00+05:00 the next day.
		atUTC := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
		atEast := time.Date(2026, 11, 24, 1, 0, 0, 0, time.FixedZone("+05", 5*3600))

		const writers = 20
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				at := atUTC
				if i%2 == 1 {
					at = atEast
				}
				errs <- st.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					for range 3 {
						if err := store.CountEmailEvent(ctx, tx, org, domain, store.StatDelivered, at, 1); err != nil {
							return err
						}
						if err := store.CountEmailEvent(ctx, tx, org, domain, store.StatAccepted, at, 3); err != nil {
							return err
						}
					}
					return nil
				})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got := statsOn(t, st, org, nil, "2026-11-23")
		if got != (store.StatCounts{Delivered: 3 * writers, Accepted: 9 * writers}) {
			t.Fatalf("counters after %d concurrent increments: %+v", writers, got)
		}
		rows, err := st.DB.NewSelect().TableExpr("email_stats_daily").Count(ctx)
		if err != nil || rows < 1 || rows > store.StatShards {
			t.Fatalf("rollup rows %d (%v), want 1 to %d shards of one day", rows, err, store.StatShards)
		}
		if next := statsOn(t, st, org, nil, "2026-11-24"); next != (store.StatCounts{}) {
			t.Fatalf("the next UTC day counted %+v", next)
		}
	})
}

func TestStatsZeroFilledPerDomainAndOrganization(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		other := newOrg(t, st, "other")
		a := newDomain(t, st, org, "a.example", store.DomainVerified)
		b := newDomain(t, st, org, "b.example", store.DomainVerified)
		foreign := newDomain(t, st, other, "a.example", store.DomainVerified)
		for _, c := range []struct {
			org, domain int64
			counter     store.StatCounter
			at          string
			n           int
		}{
			{org, a, store.StatAccepted, "2026-11-02", 5},
			{org, a, store.StatDelivered, "2026-11-02", 4},
			{org, b, store.StatAccepted, "2026-11-02", 2},
			{org, b, store.StatBounced, "2026-11-04", 1},
			{org, a, store.StatClicked, "2026-10-31", 9}, // before the range
			{other, foreign, store.StatAccepted, "2026-11-02", 100},
		} {
			if err := store.CountEmailEvent(ctx, st.DB, c.org, c.domain, c.counter, day(c.at).Add(13*time.Hour), c.n); err != nil {
				t.Fatal(err)
			}
		}

		all, err := st.Stats(ctx, org, nil, day("2026-11-01"), day("2026-11-05"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]store.StatCounts{
			"2026-11-02": {Accepted: 7, Delivered: 4},
			"2026-11-04": {Bounced: 1},
		}
		if len(all) != 5 {
			t.Fatalf("%d days, want 5 (zero-filled): %+v", len(all), all)
		}
		for i, d := range all {
			name := d.Day.Format(time.DateOnly)
			if name != day("2026-11-01").AddDate(0, 0, i).Format(time.DateOnly) || d.Day.Location() != time.UTC {
				t.Fatalf("day %d is %v", i, d.Day)
			}
			if d.StatCounts != want[name] {
				t.Fatalf("%s: %+v, want %+v", name, d.StatCounts, want[name])
			}
		}
		if got := statsOn(t, st, org, &b, "2026-11-02"); got != (store.StatCounts{Accepted: 2}) {
			t.Fatalf("domain b on 11-02: %+v", got)
		}
		if got := statsOn(t, st, other, nil, "2026-11-02"); got != (store.StatCounts{Accepted: 100}) {
			t.Fatalf("the other organization: %+v", got)
		}
		// Another organization's domain id reads nothing of it.
		if got := statsOn(t, st, org, &foreign, "2026-11-02"); got != (store.StatCounts{}) {
			t.Fatalf("a foreign domain id read %+v", got)
		}

		if days, err := st.Stats(ctx, org, nil, day("2026-01-01"), day("2026-01-01").AddDate(0, 0, store.MaxStatsDays-1)); err != nil || len(days) != store.MaxStatsDays {
			t.Fatalf("a range of %d days: %d days, %v", store.MaxStatsDays, len(days), err)
		}
		if _, err := st.Stats(ctx, org, nil, day("2026-01-01"), day("2026-01-01").AddDate(0, 0, store.MaxStatsDays)); err == nil {
			t.Fatal("a range one day too long was read")
		}
		if _, err := st.Stats(ctx, org, nil, day("2026-01-02"), day("2026-01-01")); err == nil {
			t.Fatal("a range ending before it starts was read")
		}
		if err := store.CountEmailEvent(ctx, st.DB, org, a, "sent; DROP TABLE domains", time.Now(), 1); err == nil {
			t.Fatal("an unknown counter was counted")
		}
		if err := store.CountEmailEvent(ctx, st.DB, org, a, store.StatOpened, time.Now(), -1); err == nil {
			t.Fatal("a negative increment was counted")
		}
	})
}

func TestSuppressionList(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		other := newOrg(t, st, "other")

		if err := store.Suppress(ctx, st.DB, org, " Ada@Example.COM ", store.SuppressionHardBounce); err != nil {
			t.Fatal(err)
		}
		first, _, err := st.ListSuppressions(ctx, org, store.Page{})
		if err != nil || len(first) != 1 || first[0].Email != "ada@example.com" || first[0].Reason != store.SuppressionHardBounce {
			t.Fatalf("list after the first suppression: %+v %v", first, err)
		}
		// Idempotent: the entry keeps its first reason and time.
		if err := store.Suppress(ctx, st.DB, org, "ada@example.com", store.SuppressionComplaint); err != nil {
			t.Fatal(err)
		}
		again, _, err := st.ListSuppressions(ctx, org, store.Page{})
		if err != nil || len(again) != 1 || again[0].Reason != store.SuppressionHardBounce || !again[0].CreatedAt.Equal(first[0].CreatedAt) {
			t.Fatalf("list after suppressing again: %+v %v", again, err)
		}
		for _, bad := range []struct{ email, reason string }{{"", store.SuppressionComplaint}, {"  ", store.SuppressionComplaint}, {"bob@example.com", "spam"}} {
			if err := store.Suppress(ctx, st.DB, org, bad.email, bad.reason); err == nil {
				t.Fatalf("Suppress(%q, %q) succeeded", bad.email, bad.reason)
			}
		}

		among, err := st.SuppressedAmong(ctx, org, []string{"ADA@example.com", "bob@example.com", "ada@EXAMPLE.com"}, false)
		if err != nil || len(among) != 2 || !among["ADA@example.com"] || !among["ada@EXAMPLE.com"] {
			t.Fatalf("suppressed among: %v %v", among, err)
		}
		if among, err := st.SuppressedAmong(ctx, other, []string{"ada@example.com"}, false); err != nil || len(among) != 0 {
			t.Fatalf("another organization's list holds %v (%v)", among, err)
		}
		if among, err := st.SuppressedAmong(ctx, org, nil, false); err != nil || len(among) != 0 {
			t.Fatalf("no addresses: %v %v", among, err)
		}

		// Keyset pages, oldest first.
		for i := range 5 {
			if err := store.Suppress(ctx, st.DB, org, fmt.Sprintf("r%d@example.com", i), store.SuppressionComplaint); err != nil {
				t.Fatal(err)
			}
		}
		var walked []string
		page := store.Page{Limit: 2}
		for {
			rows, more, err := st.ListSuppressions(ctx, org, page)
			if err != nil || len(rows) > 2 {
				t.Fatalf("page %+v: %d rows, %v", page, len(rows), err)
			}
			for _, r := range rows {
				walked = append(walked, r.Email)
			}
			if !more {
				break
			}
			page.After = rows[len(rows)-1].ID
		}
		if fmt.Sprint(walked) != "[ada@example.com r0@example.com r1@example.com r2@example.com r3@example.com r4@example.com]" {
			t.Fatalf("walk %v", walked)
		}

		if _, err := st.DeleteSuppression(ctx, other, "ada@example.com"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another organization deleted the entry: %v", err)
		}
		removed, err := st.DeleteSuppression(ctx, org, "ADA@EXAMPLE.com")
		if err != nil || removed.Email != "ada@example.com" || removed.Reason != store.SuppressionHardBounce || !removed.CreatedAt.Equal(first[0].CreatedAt) {
			t.Fatalf("removed %+v %v", removed, err)
		}
		if _, err := st.DeleteSuppression(ctx, org, "ada@example.com"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if among, _ := st.SuppressedAmong(ctx, org, []string{"ada@example.com"}, false); len(among) != 0 {
			t.Fatalf("still suppressed after delete: %v", among)
		}

		// An internationalized domain is one address in either form, as
		// recipients are stored in the IDNA one.
		if err := store.Suppress(ctx, st.DB, org, "ada@Bücher.example", store.SuppressionComplaint); err != nil {
			t.Fatal(err)
		}
		if among, _ := st.SuppressedAmong(ctx, org, []string{"ada@xn--bcher-kva.example"}, false); !among["ada@xn--bcher-kva.example"] {
			t.Fatalf("a complaint for ada@Bücher.example does not stop ada@xn--bcher-kva.example: %v", among)
		}
		if removed, err := st.DeleteSuppression(ctx, org, "ada@bücher.example"); err != nil || removed.Email != "ada@xn--bcher-kva.example" {
			t.Fatalf("delete by the Unicode form: %+v %v", removed, err)
		}

		// An entry stored before domains were normalized to IDNA keeps the
		// Unicode form the list shows; deleting by that form removes it.
		legacy := &store.Suppression{OrganizationID: org, Email: "bob@bücher.example", Reason: store.SuppressionHardBounce, CreatedAt: time.Now()}
		if _, err := st.DB.NewInsert().Model(legacy).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if removed, err := st.DeleteSuppression(ctx, org, "Bob@Bücher.example"); err != nil || removed.Email != "bob@bücher.example" {
			t.Fatalf("delete of an entry in the form of before: %+v %v", removed, err)
		}
		if n, err := st.DB.NewSelect().Model((*store.Suppression)(nil)).Where("organization_id = ?", org).Where("email = ?", "bob@bücher.example").Count(ctx); err != nil || n != 0 {
			t.Fatalf("the entry of before is still listed: %d, %v", n, err)
		}
	})
}

// Ingest counts an event once per owning organization, in its own statistics,
// only when the event is new; a complaint suppresses the recipient for each.
func TestIngestCountsNewEventsOnceAndSuppressesComplaints(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		other := newOrg(t, st, "other")
		pending := newOrg(t, st, "pending")
		domainA := newDomain(t, st, org, "shared.example", store.DomainVerified)
		domainB := newDomain(t, st, other, "shared.example", store.DomainVerified)
		newDomain(t, st, pending, "shared.example", store.DomainPending)
		owners, err := st.VerifiedDomainOrganizations(ctx, "shared.example")
		if err != nil || fmt.Sprint(owners) != fmt.Sprint([]store.DomainOwner{{OrganizationID: org, DomainID: domainA}, {OrganizationID: other, DomainID: domainB}}) {
			t.Fatalf("owners %+v %v", owners, err)
		}
		ingestFor := func(id, eventType, to string) bool {
			t.Helper()
			ev := &store.Event{EventID: id, Domain: "shared.example", EventType: eventType, OccurredAt: time.Date(2026, 11, 20, 23, 59, 0, 0, time.UTC),
				MessageID: "m", ToEmail: to, Subject: "s"}
			_, created, err := st.IngestEvent(ctx, ev, owners, []byte("{}"), newDeliveryID)
			if err != nil {
				t.Fatal(err)
			}
			return created
		}
		ingest := func(id, eventType string) bool { return ingestFor(id, eventType, "Grace@Customer.Example") }
		if !ingest("c1", "complained") || ingest("c1", "complained") || ingest("c1", "complained") {
			t.Fatal("a repeated event_id was created again")
		}
		if !ingest("b1", "bounced") || !ingest("o1", "opened") || ingest("o1", "opened") {
			t.Fatal("created flags of bounced/opened")
		}
		for _, o := range []struct{ org, domain int64 }{{org, domainA}, {other, domainB}} {
			if got := statsOn(t, st, o.org, &o.domain, "2026-11-20"); got != (store.StatCounts{Complained: 1, Bounced: 1, Opened: 1}) {
				t.Fatalf("organization %d counted %+v", o.org, got)
			}
			rows, _, err := st.ListSuppressions(ctx, o.org, store.Page{})
			if err != nil || len(rows) != 1 || rows[0].Email != "grace@customer.example" || rows[0].Reason != store.SuppressionComplaint {
				t.Fatalf("organization %d suppressions %+v %v", o.org, rows, err)
			}
		}
		if rows, _, _ := st.ListSuppressions(ctx, pending, store.Page{}); len(rows) != 0 {
			t.Fatalf("an organization without the domain verified got suppressions %+v", rows)
		}
		// An ingested unsubscribe suppresses too, with its own reason.
		if !ingestFor("u1", "unsubscribed", "hal@customer.example") {
			t.Fatal("the unsubscribed event was not created")
		}
		if among, err := st.SuppressedAmong(ctx, org, []string{"hal@customer.example"}, true); err != nil || !among["hal@customer.example"] {
			t.Fatalf("an ingested unsubscribe did not suppress: %v %v", among, err)
		}
		if among, _ := st.SuppressedAmong(ctx, org, []string{"hal@customer.example"}, false); len(among) != 0 {
			t.Fatal("an ingested unsubscribe stops mail sent without unsubscribe")
		}
		if got := statsOn(t, st, pending, nil, "2026-11-20"); got != (store.StatCounts{}) {
			t.Fatalf("an organization without the domain verified counted %+v", got)
		}
	})
}

// Every email event type of the catalogue has the statistics counter of its
// name, so ingest counts each one and refuses nothing it accepts.
func TestEveryEmailEventTypeHasACounter(t *testing.T) {
	for _, typ := range eventtype.Email() {
		if !store.StatCounter(typ).Valid() {
			t.Errorf("email event type %s has no statistics counter", typ)
		}
	}
}
