package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/recovery"
)

// A receiver fails, its deliveries fail, it recovers: one request recovers
// every failed delivery of the window, each sent once more.
func TestRecoverFailedDeliveries(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/rec", "delivered")
	path := fmt.Sprintf("/api/v1/webhooks/%d", id)

	rcv.expect("/rec", secret, 200)
	ok := h.sendTest(id, nil)
	h.waitStatus(id, ok, "delivered")

	rcv.expect("/rec", secret, 500)
	var failed []string
	for range 3 {
		dID := h.sendTest(id, nil)
		rcv.waitFor(t, dID, 1)
		failed = append(failed, dID)
	}
	for _, dID := range failed {
		testenv.Eventually(t, 10*time.Second, "first attempt logged", func() bool {
			_, attempts := h.deliveryStatus(id, dID)
			return len(attempts) == 1
		})
	}
	// The receiver is down: the operator disables the webhook (its pending
	// deliveries fail), fixes the receiver, enables it and recovers.
	h.do("PATCH", path, h.adminKey, map[string]any{"status": "disabled"}).data(t, 200)
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	h.do("POST", path+"/recover", h.adminKey, map[string]any{"since": since}).expectError(t, 409, "conflict")
	h.do("PATCH", path, h.adminKey, map[string]any{"status": "enabled"}).data(t, 200)
	rcv.expect("/rec", secret, 200)

	r := h.do("POST", path+"/recover", h.adminKey, map[string]any{"since": since})
	if d := r.data(t, 202); d["recovered"] != float64(3) {
		t.Fatalf("recover answered %s", r.Raw)
	}
	for _, dID := range failed {
		h.waitStatus(id, dID, "delivered")
		if n := len(rcv.requests(dID)); n != 2 {
			t.Fatalf("delivery %s sent %d times", dID, n)
		}
	}
	if n := len(rcv.requests(ok)); n != 1 {
		t.Fatalf("a delivered delivery was sent again (%d)", n)
	}
	// Nothing failed any more.
	if d := h.do("POST", path+"/recover", h.adminKey, map[string]any{"since": since}).data(t, 202); d["recovered"] != float64(0) {
		t.Fatalf("second recovery %v", d)
	}

	for _, body := range []map[string]any{
		{"since": time.Now().Add(-15 * 24 * time.Hour).UTC().Format(time.RFC3339)},
		{"since": since, "until": time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)},
		{"since": "yesterday"},
		{},
	} {
		h.do("POST", path+"/recover", h.adminKey, body).expectError(t, 422, "validation_failed")
	}
	_, otherKey := h.newOrg("other")
	h.do("POST", path+"/recover", otherKey, map[string]any{"since": since}).expectError(t, 404, "not_found")
}

// The redelivery activity, retried (as after a worker crash), sends each
// delivery once per recovery; another recovery finds nothing failed.
func TestRedeliverOncePerRecovery(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/once", "delivered")
	rcv.expect("/once", secret, 200)
	dID, _ := deliveryruns.NewDeliveryID()
	if err := h.store.CreateDelivery(t.Context(), &store.Delivery{ID: dID, OrganizationID: h.orgID, WebhookID: id, EventType: "delivered",
		Body: []byte(`{"event_type":"delivered","timestamp":"2026-11-23T10:00:00Z","data":{}}`), Status: store.DeliveryFailed}); err != nil {
		t.Fatal(err)
	}
	a := &activities.Recovery{Store: h.store, Runs: &deliveryruns.Runs{Temporal: h.temporal}}
	in := recovery.RedeliverInput{DeliveryID: dID, RecoveryID: "r1"}
	for try := range 3 {
		r, err := a.Redeliver(t.Context(), in)
		if err != nil || !r.Redelivered {
			t.Fatalf("try %d: %+v %v", try, r, err)
		}
	}
	h.waitStatus(id, dID, "delivered")
	if r, err := a.Redeliver(t.Context(), in); err != nil || !r.Redelivered {
		t.Fatalf("after the series: %+v %v", r, err)
	}
	if r, err := a.Redeliver(t.Context(), recovery.RedeliverInput{DeliveryID: dID, RecoveryID: "r2"}); err != nil || r.Redelivered {
		t.Fatalf("another recovery of a delivered delivery: %+v %v", r, err)
	}
	time.Sleep(time.Second)
	if n := len(rcv.requests(dID)); n != 1 {
		t.Fatalf("sent %d times", n)
	}
}
