package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
)

func (h *harness) deliveries(webhookID int64, query string) map[string]any {
	h.t.Helper()
	return h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries%s", webhookID, query), h.adminKey, nil).data(h.t, 200)
}

func (h *harness) deliveryStatus(webhookID int64, id string) (string, []any) {
	h.t.Helper()
	m := h.listedDelivery(webhookID, id)
	return m["status"].(string), m["attempts"].([]any)
}

func (h *harness) listedDelivery(webhookID int64, id string) map[string]any {
	h.t.Helper()
	for _, d := range h.deliveries(webhookID, "?limit=100")["deliveries"].([]any) {
		if m := d.(map[string]any); m["id"] == id {
			return m
		}
	}
	h.t.Fatalf("delivery %s not listed", id)
	return nil
}

func (h *harness) waitStatus(webhookID int64, id, status string) []any {
	h.t.Helper()
	var attempts []any
	testenv.Eventually(h.t, 60*time.Second, "delivery "+id+" "+status, func() bool {
		var s string
		s, attempts = h.deliveryStatus(webhookID, id)
		return s == status
	})
	return attempts
}

func (h *harness) sendTest(webhookID int64, body any) string {
	h.t.Helper()
	d := h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/test", webhookID), h.adminKey, body).data(h.t, 201)
	return d["delivery"].(map[string]any)["id"].(string)
}

func TestTestEventAndRedelivery(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/t", "delivered")
	rcv.expect("/t", secret)

	dID := h.sendTest(id, map[string]any{"event_type": "bounced"})
	first := rcv.waitFor(t, dID, 1)[0]
	if first.Header.Get("X-Service-Event") != "bounced" || !strings.Contains(first.Body, `"to_email":"recipient@example.com"`) {
		t.Fatalf("test event %v %s", first.Header, first.Body)
	}
	h.waitStatus(id, dID, "delivered")

	// Redelivery: a new series with the same id and the same bytes.
	r := h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/deliveries/%s/retry", id, dID), h.adminKey, nil).data(t, 200)
	if r["delivery"].(map[string]any)["status"] != "pending" {
		t.Fatalf("retry answered %v", r)
	}
	both := rcv.waitFor(t, dID, 2)
	if both[1].Body != both[0].Body || both[1].Header.Get("webhook-id") != dID {
		t.Fatalf("redelivery differs: %s vs %s", both[1].Body, both[0].Body)
	}
	if attempts := h.waitStatus(id, dID, "delivered"); len(attempts) != 2 {
		t.Fatalf("attempts after redelivery %v", attempts)
	}
	if n := h.listedDelivery(id, dID)["attempt_count"]; n != 2.0 {
		t.Fatalf("attempt_count after redelivery %v", n)
	}

	// A test clicked or opened event has the fields the real one has.
	for eventType, want := range map[string]string{
		"clicked": `"url":"https://example.com/","user_agent":"Mozilla/5.0 (Mailyard test event)"`,
		"opened":  `"subject":"Mailyard test event","user_agent":"Mozilla/5.0 (Mailyard test event)"}`,
	} {
		if got := rcv.waitFor(t, h.sendTest(id, map[string]any{"event_type": eventType}), 1)[0]; !strings.Contains(got.Body, want) {
			t.Fatalf("test %s event %s, want it to hold %s", eventType, got.Body, want)
		}
	}

	// Default body: a delivered event. Unknown delivery ids are 404.
	if got := rcv.waitFor(t, h.sendTest(id, nil), 1)[0]; got.Header.Get("X-Service-Event") != "delivered" {
		t.Fatalf("default test event %v", got.Header)
	}
	h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/deliveries/%s/retry", id, "not-a-uuid"), h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/deliveries/0193a5c4-2f00-7000-8000-000000000001/retry", id), h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/test", id), h.adminKey, map[string]any{"event_type": "sent"}).expectError(t, 422, "validation_failed")
}

// TestDeliveryLogShowsTheLatestAttempts: each retry adds a series of
// attempts, so the log shows the latest 24 and counts them all.
func TestDeliveryLogShowsTheLatestAttempts(t *testing.T) {
	h := newHarness(t)
	id, _ := h.createWebhook(h.adminKey, "https://hooks.example.com/never", "delivered")
	dID := h.sendTest(id, nil)
	w, err := h.store.WebhookInOrganization(context.Background(), h.orgID, id)
	if err != nil {
		t.Fatal(err)
	}
	for code := 500; code < 530; code++ {
		a := &store.DeliveryAttempt{DeliveryID: dID, AttemptedAt: time.Now().UTC(), StatusCode: &code}
		if _, err := h.store.RecordAttempt(context.Background(), a, w.ID, store.AttemptEffect{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	d := h.listedDelivery(id, dID)
	var codes []int
	for _, a := range d["attempts"].([]any) {
		codes = append(codes, int(a.(map[string]any)["status_code"].(float64)))
	}
	if d["attempt_count"] != 30.0 || len(codes) != 24 || codes[0] != 506 || codes[23] != 529 {
		t.Fatalf("attempt_count %v, attempts shown %v", d["attempt_count"], codes)
	}
}

// TestAttemptOutcomes walks a shortened schedule through a redirect, a 429
// with Retry-After, a gzip bomb and a success, all recorded in the log.
func TestAttemptOutcomes(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	short := api.New(api.Deps{Config: h.cfg, Store: h.store, Temporal: h.temporal, Logger: discardLogger(),
		DeliverySchedule: []time.Duration{0, time.Second, 2 * time.Second, time.Second, time.Second}})
	shortSrv := httpServer(t, short.Handler())

	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/o", "delivered")
	rcv.expect("/o", secret, 302, 429, 500, 200)
	rcv.extraHdr[302] = http.Header{"Location": {"https://127.0.0.1:1/elsewhere"}}
	rcv.extraHdr[429] = http.Header{"Retry-After": {"3"}}
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, _ = zw.Write(bytes.Repeat([]byte("A"), 50<<20))
	_ = zw.Close()
	rcv.extraHdr[500] = http.Header{"Content-Encoding": {"gzip"}}
	rcv.bodies[500] = bomb.Bytes()

	r := post(t, shortSrv.URL, fmt.Sprintf("/api/v1/webhooks/%d/test", id), h.adminKey, nil)
	dID := r.data(t, 201)["delivery"].(map[string]any)["id"].(string)
	got := rcv.waitFor(t, dID, 4)
	attempts := h.waitStatus(id, dID, "delivered")
	var codes []int
	for _, a := range attempts {
		codes = append(codes, int(a.(map[string]any)["status_code"].(float64)))
	}
	if fmt.Sprint(codes) != "[302 429 500 200]" {
		t.Fatalf("attempt statuses %v", codes)
	}
	bombLog := attempts[2].(map[string]any)
	if len(bombLog["response_body"].(string)) != 4096 || bombLog["response_truncated"] != true {
		t.Fatalf("gzip bomb kept %d bytes, truncated %v", len(bombLog["response_body"].(string)), bombLog["response_truncated"])
	}
	for i := 1; i < len(got); i++ {
		if got[i].Body != got[0].Body {
			t.Fatal("retries sent different bytes")
		}
	}
	// Retry-After 3 s replaced the 2 s step (within the next two steps, 3 s).
	t2, _ := time.Parse(time.RFC3339Nano, attempts[1].(map[string]any)["attempted_at"].(string))
	t3, _ := time.Parse(time.RFC3339Nano, attempts[2].(map[string]any)["attempted_at"].(string))
	if gap := t3.Sub(t2); gap < 3*time.Second {
		t.Fatalf("attempt after Retry-After: 3 came %s later", gap)
	}
}

func TestGoneDisablesWebhook(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/gone", "delivered")
	rcv.expect("/gone", secret, 410)
	dID := h.sendTest(id, nil)
	if attempts := h.waitStatus(id, dID, "failed"); len(attempts) != 1 {
		t.Fatalf("attempts %v", attempts)
	}
	w := h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d", id), h.adminKey, nil).data(t, 200)["webhook"].(map[string]any)
	if w["status"] != "disabled" || w["disabled_reason"] != "receiver_gone" || w["disabled_at"] == nil {
		t.Fatalf("webhook after 410: %v", w)
	}
	h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/test", id), h.adminKey, nil).expectError(t, 409, "conflict")
	h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/deliveries/%s/retry", id, dID), h.adminKey, nil).expectError(t, 409, "conflict")

	// Enabled again, the same webhook (same secret, same log) receives.
	rcv.expect("/gone", secret, 200)
	w = h.do("PATCH", fmt.Sprintf("/api/v1/webhooks/%d", id), h.adminKey, map[string]any{"status": "enabled"}).data(t, 200)["webhook"].(map[string]any)
	if w["status"] != "enabled" || w["disabled_reason"] != nil || w["disabled_at"] != nil {
		t.Fatalf("enabled: %v", w)
	}
	h.waitStatus(id, h.sendTest(id, nil), "delivered")
}

func TestDeleteStopsPendingDeliveries(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/down", "delivered")
	rcv.expect("/down", secret, 500)
	dID := h.sendTest(id, nil)
	rcv.waitFor(t, dID, 1)
	testenv.Eventually(t, 10*time.Second, "first attempt logged", func() bool {
		_, attempts := h.deliveryStatus(id, dID)
		return len(attempts) == 1
	})
	// The series waits 5 s before the next attempt: a retry now is refused.
	h.do("POST", fmt.Sprintf("/api/v1/webhooks/%d/deliveries/%s/retry", id, dID), h.adminKey, nil).expectError(t, 409, "conflict")

	h.do("DELETE", fmt.Sprintf("/api/v1/webhooks/%d", id), h.adminKey, nil).data(t, 200)
	testenv.Eventually(t, 10*time.Second, "workflow cancelled", func() bool {
		desc, err := h.temporal.DescribeWorkflowExecution(t.Context(), delivery.WorkflowID(dID), "")
		return err == nil && desc.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED
	})
	d, err := h.store.DeliveryOfWebhook(t.Context(), id, dID)
	if err != nil || d.Status != store.DeliveryFailed {
		t.Fatalf("delivery after delete %+v %v", d, err)
	}
	time.Sleep(6 * time.Second)
	if n := len(rcv.requests(dID)); n != 1 {
		t.Fatalf("receiver got %d requests after the delete", n)
	}
}

func TestDeliveriesPagination(t *testing.T) {
	h := newHarness(t)
	id, _ := h.createWebhook(h.adminKey, "https://hooks.example.com/p", "delivered")
	var ids []string
	for i := range 5 {
		dID := fmt.Sprintf("0193a5c4-2f00-7000-8000-00000000000%d", i)
		ids = append(ids, dID)
		if err := h.store.CreateDelivery(t.Context(), &store.Delivery{ID: dID, OrganizationID: h.orgID, WebhookID: id, EventType: "delivered", Body: []byte("{}"), Status: store.DeliveryDelivered}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	query := "?limit=2"
	for pages := 0; ; pages++ {
		page := h.deliveries(id, query)
		for _, d := range page["deliveries"].([]any) {
			seen = append(seen, d.(map[string]any)["id"].(string))
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			if pages != 2 {
				t.Fatalf("%d pages", pages+1)
			}
			break
		}
		query = "?limit=2&cursor=" + next
	}
	if fmt.Sprint(seen) != fmt.Sprint([]string{ids[4], ids[3], ids[2], ids[1], ids[0]}) {
		t.Fatalf("pages %v", seen)
	}
	h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries?cursor=zzz", id), h.adminKey, nil).expectError(t, 422, "validation_failed")
	h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries?limit=101", id), h.adminKey, nil).expectError(t, 422, "validation_failed")
}

// A retry sent the moment the log turns final always starts a new series,
// even while the previous run is still finishing; 409 only while the log
// says pending.
func TestRetryRightAfterTheLogTurnsFinal(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/r", "delivered")
	rcv.expect("/r", secret)
	dID := h.sendTest(id, nil)
	retry := fmt.Sprintf("/api/v1/webhooks/%d/deliveries/%s/retry", id, dID)
	for round := 1; round <= 5; round++ {
		testenv.Eventually(t, 30*time.Second, "delivered", func() bool {
			d, err := h.store.DeliveryOfWebhook(t.Context(), id, dID)
			return err == nil && d.Status == store.DeliveryDelivered
		})
		h.do("POST", retry, h.adminKey, nil).data(t, 200)
		// Pending now: a second retry is refused until the series ends.
		if d, _ := h.store.DeliveryOfWebhook(t.Context(), id, dID); d.Status == store.DeliveryPending {
			if r := h.do("POST", retry, h.adminKey, nil); r.Status != 409 && r.Status != 200 {
				t.Fatalf("retry of a pending delivery answered %d", r.Status)
			}
		}
		rcv.waitFor(t, dID, round+1)
	}
	h.waitStatus(id, dID, "delivered")
}

// A test event whose series cannot start (Temporal refuses it) is taken
// back: nothing was sent, and the client's retry is the test event, not a
// second one beside a pending delivery that nothing starts.
func TestTestEventWhoseSeriesCannotStartIsTakenBack(t *testing.T) {
	h := newHarness(t)
	id, _ := h.createWebhook(h.adminKey, "https://hooks.example.com/in", "delivered")
	srv := h.serverThrough(beforeStarts(refuseStart), 0)
	if res := h.doAt(srv.URL, "POST", fmt.Sprintf("/api/v1/webhooks/%d/test", id), h.adminKey, nil, nil); res.Status < 500 {
		t.Fatalf("a test event whose series did not start: %d %s", res.Status, res.Raw)
	}
	if ds := h.deliveries(id, "")["deliveries"].([]any); len(ds) != 0 {
		t.Fatalf("deliveries after the failed start: %v", ds)
	}
}

// A test event whose start only looked failed (the run was created, its
// answer lost) is answered 201 with its delivery: its series may be sending
// the event, and a 503 "nothing was sent" made the client send a second.
func TestTestEventWhoseStartAnswerWasLostIsAnswered(t *testing.T) {
	h := newHarness(t)
	id, _ := h.createWebhook(h.adminKey, "https://hooks.example.com/in", "delivered")
	srv := h.serverThrough(loseStartAnswers, 0)
	res := h.doAt(srv.URL, "POST", fmt.Sprintf("/api/v1/webhooks/%d/test", id), h.adminKey, nil, nil)
	d := res.data(t, 201)["delivery"].(map[string]any)
	if ds := h.deliveries(id, "")["deliveries"].([]any); len(ds) != 1 || ds[0].(map[string]any)["id"] != d["id"] {
		t.Fatalf("deliveries %v, want the answered one", ds)
	}
}
