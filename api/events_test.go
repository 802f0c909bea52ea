package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

const internalToken = "internal-token-for-tests"

// post sends a JSON body to base+path with a bearer token.
func post(t *testing.T, base, path, token string, body any) response {
	t.Helper()
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest("POST", base+path, bytes.NewReader(raw))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := response{Status: res.StatusCode, Header: res.Header}
	out.Raw, _ = io.ReadAll(res.Body)
	_ = json.Unmarshal(out.Raw, &out.Body)
	return out
}

func event(id, domain, eventType string) map[string]any {
	return map[string]any{
		"event_id": id, "domain": domain, "event_type": eventType, "timestamp": "2026-11-21T10:00:00Z",
		"message_id": "3f1c9a52-7d4e-4d6a-9a0e-5b8f0c2d1e11", "to_email": "ada@customer.example", "subject": "Your <order> & receipt",
	}
}

// withField returns e with one more field.
func withField(e map[string]any, name, value string) map[string]any {
	e[name] = value
	return e
}

func deliveryIDs(t *testing.T, r response, status int) []string {
	t.Helper()
	var ids []string
	for _, id := range r.data(t, status)["delivery_ids"].([]any) {
		ids = append(ids, id.(string))
	}
	return ids
}

func TestIngestDeliversSignedEventsOnce(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	internal := h.internal()
	h.domainInStatus(h.orgID, "shop.example", store.DomainVerified)
	subscribed, secret := h.createWebhook(h.adminKey, rcv.URL+"/a?token=q", "delivered", "opened")
	rcv.expect("/a", secret)
	h.createWebhook(h.adminKey, rcv.URL+"/b", "bounced") // not subscribed to delivered

	// Authentication of the internal listener.
	post(t, internal.URL, "/internal/v1/events", "", event("e1", "shop.example", "delivered")).expectError(t, 401, "unauthorized")
	post(t, internal.URL, "/internal/v1/events", "wrong", event("e1", "shop.example", "delivered")).expectError(t, 401, "unauthorized")
	post(t, internal.URL, "/internal/v1/nothing", internalToken, map[string]any{}).expectError(t, 404, "not_found")

	ids := deliveryIDs(t, post(t, internal.URL, "/internal/v1/events", internalToken, event("e1", "Shop.Example.", "delivered")), 202)
	if len(ids) != 1 {
		t.Fatalf("delivery ids %v", ids)
	}
	got := rcv.waitFor(t, ids[0], 1)[0]
	want := `{"event_type":"delivered","timestamp":"2026-11-21T10:00:00Z","data":{"message_id":"3f1c9a52-7d4e-4d6a-9a0e-5b8f0c2d1e11","to_email":"ada@customer.example","subject":"Your <order> & receipt"}}`
	if got.Body != want {
		t.Fatalf("body\n%s\nwant\n%s", got.Body, want)
	}
	for k, v := range map[string]string{
		"Content-Type": "application/json", "User-Agent": "Mailyard-Webhooks/1", "X-Service-Event": "delivered",
		"X-Service-Delivery-Id": ids[0], "Webhook-Id": ids[0],
	} {
		if got.Header.Get(k) != v {
			t.Fatalf("header %s = %q, want %q", k, got.Header.Get(k), v)
		}
	}

	// A repeat of the event answers the same ids and sends nothing new.
	again := deliveryIDs(t, post(t, internal.URL, "/internal/v1/events", internalToken, event("e1", "shop.example", "delivered")), 202)
	if fmt.Sprint(again) != fmt.Sprint(ids) {
		t.Fatalf("repeat answered %v, first %v", again, ids)
	}
	// Another event under the same event_id is refused, not taken for the
	// first (whose deliveries it would have been answered with).
	h.domainInStatus(h.orgID, "other.example", store.DomainVerified)
	for _, other := range []map[string]any{
		event("e1", "other.example", "delivered"),
		event("e1", "unverified.example", "delivered"), // a domain no one has verified: still the event_id

		event("e1", "shop.example", "bounced"),
		withField(event("e1", "shop.example", "delivered"), "to_email", "bob@customer.example"),
	} {
		r := post(t, internal.URL, "/internal/v1/events", internalToken, other)
		r.expectError(t, 422, "validation_failed")
		if locs := r.detailLocations(); len(locs) == 0 || locs[0] != "body.event_id" {
			t.Fatalf("details at %v: %s", locs, r.Raw)
		}
	}
	testenv.Eventually(t, 10*time.Second, "delivered status", func() bool {
		page := h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries", subscribed), h.adminKey, nil).data(t, 200)
		ds := page["deliveries"].([]any)
		return len(ds) == 1 && ds[0].(map[string]any)["status"] == "delivered"
	})
	time.Sleep(500 * time.Millisecond)
	if n := len(rcv.requests(ids[0])); n != 1 {
		t.Fatalf("receiver got %d requests for one event", n)
	}
	page := h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries", subscribed), h.adminKey, nil).data(t, 200)
	d := page["deliveries"].([]any)[0].(map[string]any)
	attempts := d["attempts"].([]any)
	if d["id"] != ids[0] || d["test"] != false || len(attempts) != 1 || attempts[0].(map[string]any)["status_code"].(float64) != 200 ||
		attempts[0].(map[string]any)["response_body"] != "thanks from /a" || page["next_cursor"] != nil {
		t.Fatalf("delivery log %v", page)
	}

	// An opened event carries its user agent, as Mailyard's own do.
	opened := deliveryIDs(t, post(t, internal.URL, "/internal/v1/events", internalToken,
		withField(event("e-opened", "shop.example", "opened"), "user_agent", "Mozilla/5.0 (X11)")), 202)
	if len(opened) != 1 {
		t.Fatalf("opened fanned out to %v", opened)
	}
	if got := rcv.waitFor(t, opened[0], 1)[0]; !strings.Contains(got.Body, `"subject":"Your <order> & receipt","user_agent":"Mozilla/5.0 (X11)"}`) {
		t.Fatalf("opened body %s", got.Body)
	}

	// No subscribed webhook: accepted, no deliveries.
	if ids := deliveryIDs(t, post(t, internal.URL, "/internal/v1/events", internalToken, event("e2", "shop.example", "clicked")), 202); len(ids) != 0 {
		t.Fatalf("clicked fanned out to %v", ids)
	}
}

func TestIngestRefusals(t *testing.T) {
	h := newHarness(t)
	internal := h.internal()
	h.domainInStatus(h.orgID, "pending.example", store.DomainPending)
	h.domainInStatus(h.orgID, "verified.example", store.DomainVerified)
	for _, c := range []struct {
		name     string
		body     any
		location string
	}{
		{"unknown domain", event("x1", "nobody.example", "delivered"), "body.domain"},
		{"unverified domain", event("x2", "pending.example", "delivered"), "body.domain"},
		{"unknown type", event("x3", "pending.example", "sent"), "body.event_type"},
		{"bad timestamp", func() map[string]any {
			e := event("x4", "pending.example", "delivered")
			e["timestamp"] = "yesterday"
			return e
		}(), "body.timestamp"},
		{"timestamp after 9999 in UTC", func() map[string]any {
			// Found by FuzzBuildBody: valid RFC 3339, but not in UTC.
			e := event("x5", "verified.example", "delivered")
			e["timestamp"] = "9999-12-31T23:59:59-01:00"
			return e
		}(), "body.timestamp"},
		{"timestamp in year 0, which PostgreSQL has not", func() map[string]any {
			e := event("x13", "verified.example", "delivered")
			e["timestamp"] = "0000-06-01T00:00:00Z"
			return e
		}(), "body.timestamp"},
		{"no event id", func() map[string]any { e := event("", "pending.example", "delivered"); return e }(), "body.event_id"},
		// Mailyard's own outcome events have these ids.
		{"Mailyard's own event id", event("mailyard:0192b7e4-0000-7000-8000-000000000001:0", "verified.example", "delivered"), "body.event_id"},
		{"Mailyard's own event id in capitals", event("MAILYARD:0192b7e4-0000-7000-8000-000000000001:0", "verified.example", "delivered"), "body.event_id"},
		// The store cannot take a NUL: each was a 500.
		{"NUL in event id", event("x6\x00", "verified.example", "complained"), "body.event_id"},
		{"NUL in event id, unknown domain", event("x7\x00", "nobody.example", "delivered"), "body.event_id"},
		{"NUL in message id", func() map[string]any {
			e := event("x8", "verified.example", "complained")
			e["message_id"] = "m\x00"
			return e
		}(), "body.message_id"},
		{"NUL in to_email", func() map[string]any {
			e := event("x9", "verified.example", "complained")
			e["to_email"] = "ada\x00@customer.example"
			return e
		}(), "body.to_email"},
		{"NUL in subject", func() map[string]any {
			e := event("x10", "verified.example", "complained")
			e["subject"] = "Hi\x00"
			return e
		}(), "body.subject"},
		// The catalogue's data: url for clicked, user_agent for opened and clicked.
		{"url on a delivered event", withField(event("x11", "verified.example", "delivered"), "url", "https://x.example/"), "body.url"},
		{"user_agent on a bounced event", withField(event("x12", "verified.example", "bounced"), "user_agent", "Mozilla/5.0"), "body.user_agent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, internal.URL, "/internal/v1/events", internalToken, c.body)
			r.expectError(t, 422, "validation_failed")
			if locs := r.detailLocations(); len(locs) == 0 || locs[0] != c.location {
				t.Fatalf("details at %v, want %s first: %s", locs, c.location, r.Raw)
			}
		})
	}
	req, _ := http.NewRequest("POST", internal.URL+"/internal/v1/events", strings.NewReader("{not json"))
	req.Header.Set("Authorization", "Bearer "+internalToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Fatalf("bad JSON answered %d", res.StatusCode)
	}
}

// TestIngestWhileTemporalIsDown: the deliveries are committed, the answer is
// 503, and sending the same event again starts the missing workflows.
func TestIngestWhileTemporalIsDown(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	h.domainInStatus(h.orgID, "shop.example", store.DomainVerified)
	_, secret := h.createWebhook(h.adminKey, rcv.URL+"/a", "bounced")
	rcv.expect("/a", secret)

	downSrv := httpServer(t, h.apiWithTemporalAt("127.0.0.1:1").InternalHandler())
	post(t, downSrv.URL, "/internal/v1/events", internalToken, event("e-down", "shop.example", "bounced")).expectError(t, 503, "unavailable")

	ids := deliveryIDs(t, post(t, h.internal().URL, "/internal/v1/events", internalToken, event("e-down", "shop.example", "bounced")), 202)
	if len(ids) != 1 {
		t.Fatalf("ids %v", ids)
	}
	rcv.waitFor(t, ids[0], 1)

	// The domain stops being verified before the event is sent again: its
	// deliveries were accepted, so they still start. A new event for the
	// domain is refused.
	post(t, downSrv.URL, "/internal/v1/events", internalToken, event("e-down-2", "shop.example", "bounced")).expectError(t, 503, "unavailable")
	if _, err := h.store.DB.NewUpdate().Model((*store.Domain)(nil)).Set("status = ?", store.DomainFailed).
		Where("domain = ?", "shop.example").Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids = deliveryIDs(t, post(t, h.internal().URL, "/internal/v1/events", internalToken, event("e-down-2", "shop.example", "bounced")), 202)
	if len(ids) != 1 {
		t.Fatalf("ids %v", ids)
	}
	rcv.waitFor(t, ids[0], 1)
	post(t, h.internal().URL, "/internal/v1/events", internalToken, event("e-down-3", "shop.example", "bounced")).expectError(t, 422, "validation_failed")
	// The same event id for another domain no one verified is not that event.
	post(t, h.internal().URL, "/internal/v1/events", internalToken, event("e-down-2", "other.example", "bounced")).expectError(t, 422, "validation_failed")
}

// A retry whose start met an unavailable Temporal leaves the delivery
// reopened (pending, its series number raised) with no run; the retry sent
// again starts that series, and so does the event sent again, as it starts
// any delivery of the event left unstarted.
// Before, the start joined only an open run, and the first series' run had
// closed: the delivery stayed pending with nothing to send it.
func TestEventSentAgainStartsAFailedRetry(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	h.domainInStatus(h.orgID, "shop.example", store.DomainVerified)
	webhookID, secret := h.createWebhook(h.adminKey, rcv.URL+"/a", "bounced")
	rcv.expect("/a", secret)
	ids := deliveryIDs(t, post(t, h.internal().URL, "/internal/v1/events", internalToken, event("e-retry", "shop.example", "bounced")), 202)
	if len(ids) != 1 {
		t.Fatalf("ids %v", ids)
	}
	rcv.waitFor(t, ids[0], 1)
	h.waitStatus(webhookID, ids[0], store.DeliveryDelivered)

	down := httpServer(t, h.apiWithTemporalAt("127.0.0.1:1").Handler())
	retry := fmt.Sprintf("/api/v1/webhooks/%d/deliveries/%s/retry", webhookID, ids[0])
	failRetry := func() {
		t.Helper()
		h.doAt(down.URL, "POST", retry, h.adminKey, nil, nil).expectError(t, 503, "unavailable")
		if status, _ := h.deliveryStatus(webhookID, ids[0]); status != store.DeliveryPending {
			t.Fatalf("after the failed retry the delivery is %s", status)
		}
	}

	// The retry sent again starts the series.
	failRetry()
	h.do("POST", retry, h.adminKey, nil).data(t, 200)
	rcv.waitFor(t, ids[0], 2)
	h.waitStatus(webhookID, ids[0], store.DeliveryDelivered)

	// So does the event sent again.
	failRetry()
	again := deliveryIDs(t, post(t, h.internal().URL, "/internal/v1/events", internalToken, event("e-retry", "shop.example", "bounced")), 202)
	if !slices.Equal(again, ids) {
		t.Fatalf("the event again: %v, first %v", again, ids)
	}
	rcv.waitFor(t, ids[0], 3)
	h.waitStatus(webhookID, ids[0], store.DeliveryDelivered)
}

// Once its domain is no longer verified, an event sent again still gets its
// deliveries (they were accepted when it was), but another event under its
// event_id is 422, as while the domain was verified: it was answered 202
// with the first event's deliveries, which it started.
func TestIngestReusedEventIDAfterTheDomainIsUnverified(t *testing.T) {
	h := newHarness(t)
	internal := h.internal()
	domainID := h.domainInStatus(h.orgID, "gone.example", store.DomainVerified)
	h.createWebhook(h.adminKey, "https://hooks.example.com/in", "delivered", "bounced")
	first := deliveryIDs(t, post(t, internal.URL, "/internal/v1/events", internalToken, event("e1", "gone.example", "delivered")), 202)
	if _, err := h.store.DB.NewUpdate().Model((*store.Domain)(nil)).Set("status = ?", store.DomainPending).Where("id = ?", domainID).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := deliveryIDs(t, post(t, internal.URL, "/internal/v1/events", internalToken, event("e1", "gone.example", "delivered")), 202)
	if len(first) != 1 || !slices.Equal(first, again) {
		t.Fatalf("the same event again: %v, first %v", again, first)
	}
	r := post(t, internal.URL, "/internal/v1/events", internalToken, event("e1", "gone.example", "bounced"))
	r.expectError(t, 422, "validation_failed")
	if locs := r.detailLocations(); len(locs) != 1 || locs[0] != "body.event_id" {
		t.Fatalf("another event under the id: details at %v: %s", locs, r.Raw)
	}
}
