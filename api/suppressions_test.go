package api_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/mailyard/mailyard/internal/store"
)

// suppress puts an address on an organization's list, as the sending
// pipeline does after a hard bounce or a complaint.
func (h *harness) suppress(org int64, email, reason string) {
	h.t.Helper()
	if err := store.Suppress(context.Background(), h.store.DB, org, email, reason); err != nil {
		h.t.Fatal(err)
	}
}

// suppressedEmails lists the emails of one page of the list.
func suppressedEmails(t *testing.T, d map[string]any) []string {
	t.Helper()
	var out []string
	for _, row := range d["suppressions"].([]any) {
		out = append(out, row.(map[string]any)["email"].(string))
	}
	return out
}

func TestSuppressionsPermissionsScopeAndDelete(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "send.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	_, statsKey := h.issueCredential(h.adminKey, domainID, "reader", "stats")
	otherOrg, otherKey := h.newOrg("other")
	h.suppress(h.orgID, "Ada@Example.com", store.SuppressionHardBounce)
	h.suppress(h.orgID, "bob@elsewhere.example", store.SuppressionComplaint) // not of the key's sending domain
	h.suppress(otherOrg, "carol@example.com", store.SuppressionComplaint)

	// Suppressions belong to the organization: a key scoped to one sending
	// domain sees all of them. The list always pages.
	for name, key := range map[string]string{"admin": h.adminKey, "send": sendKey} {
		d := h.do("GET", "/api/v1/suppressions", key, nil).data(t, 200)
		if got := fmt.Sprint(suppressedEmails(t, d)); got != "[ada@example.com bob@elsewhere.example]" {
			t.Fatalf("%s key lists %s", name, got)
		}
		if d["has_more"] != false || d["next_cursor"] != nil {
			t.Fatalf("%s key: a single page says has_more %v, next_cursor %v", name, d["has_more"], d["next_cursor"])
		}
		first := d["suppressions"].([]any)[0].(map[string]any)
		if len(first) != 3 || first["reason"] != "hard_bounce" || !strings.HasSuffix(first["created_at"].(string), "Z") {
			t.Fatalf("entry %v, want email, reason hard_bounce, created_at in UTC", first)
		}
	}
	h.do("GET", "/api/v1/suppressions", statsKey, nil).expectError(t, 403, "forbidden")
	if got := fmt.Sprint(suppressedEmails(t, h.do("GET", "/api/v1/suppressions", otherKey, nil).data(t, 200))); got != "[carol@example.com]" {
		t.Fatalf("another organization lists %s", got)
	}

	// Delete: admin only; the address in any case; 404 when absent, also for
	// another organization's entry, without repeating the address.
	h.do("DELETE", "/api/v1/suppressions/ada@example.com", sendKey, nil).expectError(t, 403, "forbidden")
	h.do("DELETE", "/api/v1/suppressions/ada@example.com", statsKey, nil).expectError(t, 403, "forbidden")
	foreign := h.do("DELETE", "/api/v1/suppressions/ADA@example.com", otherKey, nil)
	foreign.expectError(t, 404, "not_found")
	if strings.Contains(strings.ToLower(string(foreign.Raw)), "ada@") {
		t.Fatalf("a 404 repeats the address: %s", foreign.Raw)
	}
	removed := h.do("DELETE", "/api/v1/suppressions/ADA@EXAMPLE.COM", h.adminKey, nil).data(t, 200)["suppression"].(map[string]any)
	if removed["email"] != "ada@example.com" || removed["reason"] != "hard_bounce" || removed["created_at"] == nil {
		t.Fatalf("removed %v", removed)
	}
	h.do("DELETE", "/api/v1/suppressions/ada@example.com", h.adminKey, nil).expectError(t, 404, "not_found")
	// Percent-encoded in the path.
	h.do("DELETE", "/api/v1/suppressions/bob%40elsewhere.example", h.adminKey, nil).data(t, 200)
	if got := suppressedEmails(t, h.do("GET", "/api/v1/suppressions", h.adminKey, nil).data(t, 200)); len(got) != 0 {
		t.Fatalf("list after deleting both: %v", got)
	}
	if got := fmt.Sprint(suppressedEmails(t, h.do("GET", "/api/v1/suppressions", otherKey, nil).data(t, 200))); got != "[carol@example.com]" {
		t.Fatalf("the other organization's list changed: %s", got)
	}
}

// An address with a NUL cannot be on the list (the store cannot hold one,
// and asking for one was a 500): 404 like any other address not on it. Other
// control characters are looked up as written: an ingested complaint may
// have put such an address on the list.
func TestDeleteSuppressionWithControlCharacters(t *testing.T) {
	h := newHarness(t)
	h.suppress(h.orgID, "ada@example.com", store.SuppressionHardBounce)
	h.suppress(h.orgID, "odd\x01@example.com", store.SuppressionComplaint)

	for _, path := range []string{"ada%00@example.com", "%00", "ada@example.com%00"} {
		r := h.do("DELETE", "/api/v1/suppressions/"+path, h.adminKey, nil)
		r.expectError(t, 404, "not_found")
		if strings.Contains(string(r.Raw), "ada") {
			t.Fatalf("DELETE %s: the 404 repeats the address: %s", path, r.Raw)
		}
	}
	removed := h.do("DELETE", "/api/v1/suppressions/ODD%01@example.com", h.adminKey, nil).data(t, 200)["suppression"].(map[string]any)
	if removed["email"] != "odd\x01@example.com" {
		t.Fatalf("removed %v", removed)
	}
	if got := fmt.Sprint(suppressedEmails(t, h.do("GET", "/api/v1/suppressions", h.adminKey, nil).data(t, 200))); got != "[ada@example.com]" {
		t.Fatalf("list after the refusals: %s", got)
	}
}

func TestSuppressionsPageWalk(t *testing.T) {
	h := newHarness(t)
	var want []string
	for i := range 45 {
		e := fmt.Sprintf("r%02d@example.com", i)
		h.suppress(h.orgID, e, store.SuppressionHardBounce)
		want = append(want, e)
	}

	// Without limit: the default page of 20.
	d := h.do("GET", "/api/v1/suppressions", h.adminKey, nil).data(t, 200)
	if n := len(suppressedEmails(t, d)); n != 20 || d["has_more"] != true || d["next_cursor"] == nil {
		t.Fatalf("default page: %d rows, has_more %v, next_cursor %v", n, d["has_more"], d["next_cursor"])
	}

	// A walk of pages of 10; an address suppressed during the walk shows up
	// at its end, and nothing repeats.
	var walked []string
	query := "?limit=10"
	added := false
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("the walk does not end")
		}
		d := h.do("GET", "/api/v1/suppressions"+query, h.adminKey, nil).data(t, 200)
		rows := suppressedEmails(t, d)
		if len(rows) > 10 {
			t.Fatalf("page of %d rows", len(rows))
		}
		walked = append(walked, rows...)
		if d["has_more"] != true {
			if d["next_cursor"] != nil {
				t.Fatalf("last page has next_cursor %v", d["next_cursor"])
			}
			break
		}
		if !added {
			h.suppress(h.orgID, "late@example.com", store.SuppressionComplaint)
			want = append(want, "late@example.com")
			added = true
		}
		query = "?limit=10&cursor=" + url.QueryEscape(d["next_cursor"].(string))
	}
	if fmt.Sprint(walked) != fmt.Sprint(want) {
		t.Fatalf("walked %v\nwant   %v", walked, want)
	}

	for _, q := range []string{"?cursor=zzz", "?limit=5&cursor=eyJ2IjoxLCJsIjoiZG9tYWlucyIsImEiOjF9"} { // {"v":1,"l":"domains","a":1}
		r := h.do("GET", "/api/v1/suppressions"+q, h.adminKey, nil)
		r.expectError(t, 422, "validation_failed")
		if !containsLocation(r.Raw, "query.cursor") {
			t.Fatalf("%s: %s", q, r.Raw)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=101"} {
		r := h.do("GET", "/api/v1/suppressions"+q, h.adminKey, nil)
		r.expectError(t, 422, "validation_failed")
		if !containsLocation(r.Raw, "query.limit") {
			t.Fatalf("%s: %s", q, r.Raw)
		}
	}
}
