package api_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/store"
)

// walk pages through a list with the given limit, calling during after every
// page, and returns the ids in the order the pages gave them.
func (h *harness) walk(path, field string, limit int, during func()) []int64 {
	h.t.Helper()
	var ids []int64
	query := fmt.Sprintf("?limit=%d", limit)
	for pages := 0; ; pages++ {
		if pages > 1000 {
			h.t.Fatalf("%s: walk does not end", path)
		}
		d := h.do("GET", path+query, h.adminKey, nil).data(h.t, 200)
		rows := d[field].([]any)
		if len(rows) > limit {
			h.t.Fatalf("%s: page of %d rows, limit %d", path, len(rows), limit)
		}
		for _, r := range rows {
			ids = append(ids, int64(r.(map[string]any)["id"].(float64)))
		}
		more, ok := d["has_more"].(bool)
		if !ok {
			h.t.Fatalf("%s: paged answer without has_more: %v", path, d)
		}
		next, present := d["next_cursor"]
		if !present {
			h.t.Fatalf("%s: paged answer without next_cursor: %v", path, d)
		}
		if !more {
			if next != nil {
				h.t.Fatalf("%s: last page has next_cursor %v", path, next)
			}
			return ids
		}
		if len(rows) != limit {
			h.t.Fatalf("%s: a page before the last holds %d rows, want %d", path, len(rows), limit)
		}
		query = fmt.Sprintf("?limit=%d&cursor=%s", limit, url.QueryEscape(next.(string)))
		if during != nil {
			during()
		}
	}
}

// expectEachOnce checks that walked holds every id of want exactly once, in
// ascending order, and nothing twice.
func expectEachOnce(t *testing.T, what string, walked, want []int64) {
	t.Helper()
	seen := map[int64]int{}
	for i, id := range walked {
		seen[id]++
		if seen[id] > 1 {
			t.Fatalf("%s: id %d returned twice", what, id)
		}
		if i > 0 && walked[i-1] >= id {
			t.Fatalf("%s: ids not ascending: %d after %d", what, id, walked[i-1])
		}
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Fatalf("%s: id %d returned %d times", what, id, seen[id])
		}
	}
}

func (h *harness) seedDomain(org int64, i int) int64 {
	h.t.Helper()
	name := fmt.Sprintf("d%04d.example", i)
	d := &store.Domain{OrganizationID: org, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: fmt.Sprintf("tok%04d", i), Status: store.DomainVerified}
	if err := h.store.CreateDomain(context.Background(), d, nil); err != nil {
		h.t.Fatal(err)
	}
	return d.ID
}

func (h *harness) seedCredential(org int64, i int) int64 {
	h.t.Helper()
	secret := h.newKeySecret()
	k := keyauth.WithSecret(secret, &store.APIKey{OrganizationID: org, Label: fmt.Sprintf("k%d", i), Username: fmt.Sprintf("u%d", i), Permissions: store.Permissions{"send"}})
	if err := h.store.CreateCredential(context.Background(), k); err != nil {
		h.t.Fatal(err)
	}
	return k.ID
}

func (h *harness) seedWebhook(org int64) int64 {
	h.t.Helper()
	w := &store.Webhook{OrganizationID: org, URL: "https://hooks.example.com/x", EventTypes: store.EventTypes{"delivered"}}
	// The store's limit, not the API's: the walk adds webhooks beyond 20.
	if err := h.store.CreateWebhook(context.Background(), w, 1000, func(int64) ([]byte, error) { return []byte("sealed"), nil }); err != nil {
		h.t.Fatal(err)
	}
	return w.ID
}

func TestPaginationWalksEveryRowOnce(t *testing.T) {
	h := newHarness(t)
	other, _ := h.newOrg("other")
	lists := []struct {
		path, field string
		count       int
		add         func(i int) int64
	}{
		{"/api/v1/domains", "domains", 250, func(i int) int64 { return h.seedDomain(h.orgID, i) }},
		{"/api/v1/credentials", "credentials", 250, func(i int) int64 { return h.seedCredential(h.orgID, i) }},
		{"/api/v1/webhooks", "webhooks", 20, func(int) int64 { return h.seedWebhook(h.orgID) }},
	}
	// The bootstrap key is the organization's first credential.
	initial := map[string][]int64{"credentials": {}}
	boot := h.do("GET", "/api/v1/credentials", h.adminKey, nil).data(t, 200)["credentials"].([]any)
	initial["credentials"] = append(initial["credentials"], int64(boot[0].(map[string]any)["id"].(float64)))
	for _, l := range lists {
		want := initial[l.field]
		for i := range l.count - len(want) {
			want = append(want, l.add(i))
			// Rows of another organization interleave and never show.
			if i%10 == 0 {
				switch l.field {
				case "domains":
					h.seedDomain(other, 10000+i)
				case "credentials":
					h.seedCredential(other, 10000+i)
				case "webhooks":
					h.seedWebhook(other)
				}
			}
		}
		t.Run(l.field, func(t *testing.T) {
			walked := h.walk(l.path, l.field, 7, nil)
			if len(walked) != len(want) {
				t.Fatalf("walked %d rows, want %d", len(walked), len(want))
			}
			expectEachOnce(t, l.field, walked, want)

			// Rows added during a walk: the old ones still come exactly once.
			added := 0
			walked = h.walk(l.path, l.field, 7, func() {
				l.add(100000 + added)
				added++
			})
			expectEachOnce(t, l.field+" with additions", walked, want)

			// Without limit, the whole list in the first release's shape.
			d := h.do("GET", l.path, h.adminKey, nil).data(t, 200)
			if n := len(d[l.field].([]any)); n != len(want)+added {
				t.Fatalf("unpaged list has %d rows, want %d", n, len(want)+added)
			}
			if _, has := d["next_cursor"]; has {
				t.Fatalf("unpaged list carries next_cursor")
			}
			if _, has := d["has_more"]; has {
				t.Fatalf("unpaged list carries has_more")
			}
		})
	}
}

func TestPaginationRefusesBadCursorsAndLimits(t *testing.T) {
	h := newHarness(t)
	for i := range 3 {
		h.seedDomain(h.orgID, i)
		h.seedWebhook(h.orgID)
	}
	page := h.do("GET", "/api/v1/domains?limit=1", h.adminKey, nil).data(t, 200)
	domainsCursor := url.QueryEscape(page["next_cursor"].(string))
	webhookPage := h.do("GET", "/api/v1/webhooks?limit=1", h.adminKey, nil).data(t, 200)
	webhooksCursor := url.QueryEscape(webhookPage["next_cursor"].(string))

	for _, path := range []string{
		"/api/v1/domains?limit=5&cursor=zzz",
		"/api/v1/domains?cursor=%21%21",
		"/api/v1/credentials?limit=5&cursor=" + domainsCursor,
		"/api/v1/webhooks?limit=5&cursor=" + domainsCursor,
		"/api/v1/domains?limit=5&cursor=" + webhooksCursor,
		"/api/v1/domains?limit=5&cursor=eyJ2IjoxLCJsIjoiZG9tYWlucyIsImEiOiJ4In0", // {"v":1,"l":"domains","a":"x"}
		"/api/v1/domains?limit=5&cursor=eyJ2Ijo5LCJsIjoiZG9tYWlucyIsImEiOjF9",    // version 9
	} {
		r := h.do("GET", path, h.adminKey, nil)
		r.expectError(t, 422, "validation_failed")
		if locs := r.detailLocations(); len(locs) == 0 || locs[0] != "query.cursor" {
			t.Fatalf("%s: details at %v, want query.cursor first", path, locs)
		}
	}
	for _, limit := range []string{"0", "101", "-1", "x"} {
		h.do("GET", "/api/v1/domains?limit="+limit, h.adminKey, nil).expectError(t, 422, "validation_failed")
	}
	// A cursor alone pages with the default size.
	d := h.do("GET", "/api/v1/domains?cursor="+domainsCursor, h.adminKey, nil).data(t, 200)
	if n := len(d["domains"].([]any)); n != 2 || d["has_more"] != false || d["next_cursor"] != nil {
		t.Fatalf("cursor without limit: %v", d)
	}
}

// A cursor whose key is a UUID in another form than the canonical one the
// API gives out pages from that row: the key goes to SQL in its canonical
// form, since PostgreSQL's uuid type refuses urn:uuid:... (it was a 500).
func TestCursorKeysInAnyUUIDForm(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "sweep.example", store.DomainVerified)
	webhookID, _ := h.createWebhook(h.adminKey, "https://hooks.example.com/p", "delivered")
	var ids []string
	for i := range 3 {
		id := h.storeEmail(ctx, domainID, fmt.Sprintf("0193a5c4-2f00-7000-8000-00000000000%d", i))
		if err := h.store.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: h.orgID, WebhookID: webhookID, EventType: "delivered", Body: []byte("{}"), Status: store.DeliveryDelivered}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cursorAfter := func(list, after string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"v":1,"l":%q,"a":%q}`, list, after)))
	}
	deliveries := fmt.Sprintf("webhooks/%d/deliveries", webhookID)
	for _, after := range []string{"urn:uuid:" + ids[2], strings.ToUpper(ids[2]), "{" + ids[2] + "}", strings.ReplaceAll(ids[2], "-", "")} {
		for path, field := range map[string]string{
			"/api/v1/emails?cursor=" + cursorAfter("emails", after):                                           "emails",
			fmt.Sprintf("/api/v1/webhooks/%d/deliveries?cursor=", webhookID) + cursorAfter(deliveries, after): "deliveries",
		} {
			var got []string
			for _, row := range h.do("GET", path, h.adminKey, nil).data(t, 200)[field].([]any) {
				got = append(got, row.(map[string]any)["id"].(string))
			}
			// Both lists are newest first: after the newest come the others.
			if fmt.Sprint(got) != fmt.Sprint([]string{ids[1], ids[0]}) {
				t.Fatalf("%s after %s: %v, want %v", field, after, got, []string{ids[1], ids[0]})
			}
		}
	}
	for _, path := range []string{
		"/api/v1/emails?cursor=" + cursorAfter("emails", "urn:uuid:nope"),
		fmt.Sprintf("/api/v1/webhooks/%d/deliveries?cursor=", webhookID) + cursorAfter(deliveries, "urn:uuid:nope"),
	} {
		h.do("GET", path, h.adminKey, nil).expectError(t, 422, "validation_failed")
	}
}

func TestOpenAPIDocumentsConventions(t *testing.T) {
	h := newHarness(t)
	doc := h.api.OpenAPI()
	for _, path := range []string{"/api/v1/domains", "/api/v1/credentials", "/api/v1/webhooks", "/api/v1/webhooks/{id}/deliveries"} {
		op := doc.Paths[path].Get
		names := map[string]bool{}
		for _, p := range op.Parameters {
			names[p.In+":"+p.Name] = true
		}
		if !names["query:limit"] || !names["query:cursor"] {
			t.Fatalf("%s lacks limit or cursor: %v", path, names)
		}
		if op.Responses["429"] == nil || op.Responses["429"].Headers["Retry-After"] == nil || op.Responses["200"].Headers["RateLimit"] == nil {
			t.Fatalf("%s does not document the rate limit", path)
		}
	}
	for path, item := range doc.Paths {
		if item.Post == nil || !strings.HasPrefix(path, "/api/v1/") {
			continue
		}
		found := false
		for _, p := range item.Post.Parameters {
			found = found || (p.In == "header" && p.Name == "Idempotency-Key")
		}
		if !found || item.Post.Responses["409"] == nil || item.Post.Responses["422"] == nil {
			t.Fatalf("POST %s does not document Idempotency-Key and its answers", path)
		}
	}
}
