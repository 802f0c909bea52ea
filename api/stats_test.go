package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/store"
)

// count adds n to a counter of the rollup, as the sending pipeline does.
func (h *harness) count(org, domain int64, c store.StatCounter, day string, n int) {
	h.t.Helper()
	at, err := time.Parse(time.DateOnly, day)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := store.CountEmailEvent(context.Background(), h.store.DB, org, domain, c, at.Add(15*time.Hour), n); err != nil {
		h.t.Fatal(err)
	}
}

// stats reads GET /api/v1/stats with query and returns its days by date and
// its totals.
func (h *harness) stats(key, query string) (map[string]map[string]any, map[string]any) {
	h.t.Helper()
	d := h.do("GET", "/api/v1/stats?"+query, key, nil).data(h.t, 200)
	days := map[string]map[string]any{}
	for _, e := range d["stats"].([]any) {
		e := e.(map[string]any)
		days[e["date"].(string)] = e
	}
	return days, d["totals"].(map[string]any)
}

// counters formats the non-zero counters of a day or of the totals.
func counters(m map[string]any) string {
	out := ""
	for _, c := range store.StatCounters() {
		v, ok := m[string(c)].(float64)
		if !ok {
			return fmt.Sprintf("counter %s missing in %v", c, m)
		}
		if v != 0 {
			out += fmt.Sprintf("%s=%d ", c, int64(v))
		}
	}
	return out
}

func TestStatsPermissionsAndDomainScope(t *testing.T) {
	h := newHarness(t)
	a := h.domainInStatus(h.orgID, "a.example", store.DomainVerified)
	b := h.domainInStatus(h.orgID, "b.example", store.DomainVerified)
	otherOrg, otherKey := h.newOrg("other")
	foreign := h.domainInStatus(otherOrg, "c.example", store.DomainVerified)
	_, statsA := h.issueCredential(h.adminKey, a, "reader", "stats")
	_, sendA := h.issueCredential(h.adminKey, a, "sender", "send")
	_, adminA := h.issueCredential(h.adminKey, a, "manager", "admin")
	h.count(h.orgID, a, store.StatAccepted, "2026-11-02", 5)
	h.count(h.orgID, a, store.StatDelivered, "2026-11-02", 4)
	h.count(h.orgID, b, store.StatAccepted, "2026-11-02", 2)
	h.count(h.orgID, b, store.StatBounced, "2026-11-03", 1)
	h.count(otherOrg, foreign, store.StatAccepted, "2026-11-02", 100)
	const rng = "start=2026-11-01&end=2026-11-05"

	expect := func(who, key, query, day2, day3, totals string) {
		t.Helper()
		days, tot := h.stats(key, query)
		if got := counters(days["2026-11-02"]); got != day2 {
			t.Errorf("%s, %s: 2026-11-02 %q, want %q", who, query, got, day2)
		}
		if got := counters(days["2026-11-03"]); got != day3 {
			t.Errorf("%s, %s: 2026-11-03 %q, want %q", who, query, got, day3)
		}
		if got := counters(tot); got != totals {
			t.Errorf("%s, %s: totals %q, want %q", who, query, got, totals)
		}
	}
	// Admin keys read the whole organization, or one of its domains; the
	// scope of a key bounds send and stats, not admin.
	expect("admin", h.adminKey, rng, "accepted=7 delivered=4 ", "bounced=1 ", "accepted=7 delivered=4 bounced=1 ")
	expect("admin scoped to a", adminA, rng, "accepted=7 delivered=4 ", "bounced=1 ", "accepted=7 delivered=4 bounced=1 ")
	expect("admin", h.adminKey, fmt.Sprintf("%s&domain_id=%d", rng, b), "accepted=2 ", "bounced=1 ", "accepted=2 bounced=1 ")
	// A stats key sees its own sending domain only, with or without domain_id.
	expect("stats key of a", statsA, rng, "accepted=5 delivered=4 ", "", "accepted=5 delivered=4 ")
	expect("stats key of a", statsA, fmt.Sprintf("%s&domain_id=%d", rng, a), "accepted=5 delivered=4 ", "", "accepted=5 delivered=4 ")
	// Another organization sees its own counters and nothing of this one.
	expect("another organization", otherKey, rng, "accepted=100 ", "", "accepted=100 ")

	// Any domain the key may not read answers 404, exactly like one that does not exist.
	missing := h.do("GET", fmt.Sprintf("/api/v1/stats?%s&domain_id=987654321", rng), statsA, nil)
	missing.expectError(t, 404, "not_found")
	for _, c := range []struct {
		who, key string
		domain   int64
	}{{"stats key of a", statsA, b}, {"stats key of a", statsA, foreign}, {"admin", h.adminKey, foreign}, {"admin", h.adminKey, 987654321}} {
		r := h.do("GET", fmt.Sprintf("/api/v1/stats?%s&domain_id=%d", rng, c.domain), c.key, nil)
		r.expectError(t, 404, "not_found")
		if string(r.Raw) != string(missing.Raw) {
			t.Errorf("%s, domain %d: %s differs from a missing domain's %s", c.who, c.domain, r.Raw, missing.Raw)
		}
	}
	h.do("GET", "/api/v1/stats?"+rng, sendA, nil).expectError(t, 403, "forbidden")
}

func TestStatsZeroFilledAndRangeRules(t *testing.T) {
	h := newHarness(t)
	a := h.domainInStatus(h.orgID, "a.example", store.DomainVerified)
	h.count(h.orgID, a, store.StatOpened, "2026-11-03", 2)
	h.count(h.orgID, a, store.StatClicked, "2026-11-03", 1)
	h.count(h.orgID, a, store.StatDeferred, "2026-11-06", 9) // after the range

	d := h.do("GET", "/api/v1/stats?start=2026-11-01&end=2026-11-05", h.adminKey, nil).data(t, 200)
	days := d["stats"].([]any)
	if len(days) != 5 {
		t.Fatalf("%d days, want 5: %v", len(days), days)
	}
	for i, e := range days {
		e := e.(map[string]any)
		if want := fmt.Sprintf("2026-11-%02d", i+1); e["date"] != want || len(e) != 1+len(store.StatCounters()) {
			t.Fatalf("entry %d: %v, want date %s and every counter", i, e, want)
		}
		want := ""
		if e["date"] == "2026-11-03" {
			want = "opened=2 clicked=1 "
		}
		if got := counters(e); got != want {
			t.Fatalf("%s: %q, want %q", e["date"], got, want)
		}
	}
	if totals := d["totals"].(map[string]any); len(totals) != len(store.StatCounters()) || counters(totals) != "opened=2 clicked=1 " {
		t.Fatalf("totals %v", totals)
	}

	// 90 days, both ends included, is the most; one day is the least.
	if n := len(h.do("GET", "/api/v1/stats?start=2026-01-01&end=2026-03-31", h.adminKey, nil).data(t, 200)["stats"].([]any)); n != 90 {
		t.Fatalf("2026-01-01 to 2026-03-31: %d days, want 90", n)
	}
	if n := len(h.do("GET", "/api/v1/stats?start=2026-11-03&end=2026-11-03", h.adminKey, nil).data(t, 200)["stats"].([]any)); n != 1 {
		t.Fatalf("one day: %d entries", n)
	}
	for _, c := range []struct{ query, location string }{
		{"start=2026-01-01&end=2026-04-01", "query.end"}, // 91 days
		{"start=2026-11-05&end=2026-11-04", "query.end"},
		{"start=2026-13-01&end=2026-12-01", "query.start"},
		{"start=2026-02-30&end=2026-03-01", "query.start"},
		{"start=0000-01-01&end=0000-01-02", "query.start"}, // PostgreSQL has no year 0: it was a 500
		{"start=2026-11-01T00:00:00Z&end=2026-11-02", "query.start"},
		{"start=2026-11-01&end=yesterday", "query.end"},
		{"end=2026-11-02", "query.start"},
		{"start=2026-11-01", "query.end"},
		{"start=2026-11-01&end=2026-11-02&domain_id=0", "query.domain_id"},
	} {
		r := h.do("GET", "/api/v1/stats?"+c.query, h.adminKey, nil)
		r.expectError(t, 422, "validation_failed")
		if !containsLocation(r.Raw, c.location) {
			t.Errorf("%s: want a detail at %s: %s", c.query, c.location, r.Raw)
		}
	}
}

// Events ingested through the internal listener count once each, however
// often they are sent, for every organization that has the domain verified;
// a complaint suppresses the recipient, a bounce of unknown kind does not.
func TestIngestedEventsCountOnceAndComplaintsSuppress(t *testing.T) {
	h := newHarness(t)
	internal := h.internal()
	h.domainInStatus(h.orgID, "shop.example", store.DomainVerified)
	otherOrg, otherKey := h.newOrg("other")
	h.domainInStatus(otherOrg, "shop.example", store.DomainVerified)

	send := func(id, eventType, to string) {
		t.Helper()
		ev := event(id, "shop.example", eventType)
		ev["to_email"] = to
		post(t, internal.URL, "/internal/v1/events", internalToken, ev).data(t, 202)
	}
	for range 3 {
		send("c1", "complained", "Ada@Customer.Example")
	}
	send("d1", "delivered", "ada@customer.example")
	send("d1", "delivered", "ada@customer.example")
	send("b1", "bounced", "bob@customer.example")
	send("o1", "opened", "ada@customer.example")
	send("k1", "clicked", "ada@customer.example")
	// An address whose IDNA form is too long to be a suppression (no
	// recipient is) is counted and not suppressed: before, its complaint
	// was refused with a 500 for good.
	send("c2", "complained", strings.Repeat("a", 200)+"@"+strings.Repeat("日本語漢字中文韓國語.", 5)+"example")

	for who, key := range map[string]string{"owner": h.adminKey, "other owner": otherKey} {
		days, totals := h.stats(key, "start=2026-11-20&end=2026-11-22")
		// event() stamps 2026-11-21T10:00:00Z.
		if got := counters(days["2026-11-21"]); got != "delivered=1 bounced=1 complained=2 opened=1 clicked=1 " {
			t.Errorf("%s: 2026-11-21 %q", who, got)
		}
		if got := counters(totals); got != "delivered=1 bounced=1 complained=2 opened=1 clicked=1 " {
			t.Errorf("%s: totals %q", who, got)
		}
		list := h.do("GET", "/api/v1/suppressions", key, nil).data(t, 200)["suppressions"].([]any)
		if len(list) != 1 {
			t.Fatalf("%s: suppressions %v, want the complaint only", who, list)
		}
		if e := list[0].(map[string]any); e["email"] != "ada@customer.example" || e["reason"] != "complaint" {
			t.Fatalf("%s: suppression %v", who, e)
		}
	}
}
