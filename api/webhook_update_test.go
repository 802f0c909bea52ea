package api_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
)

func TestUpdateWebhook(t *testing.T) {
	h := newHarness(t)
	rcv := newReceiver(t)
	h.startDeliveryWorker(rcv)
	id, secret := h.createWebhook(h.adminKey, rcv.URL+"/a", "delivered")
	watcher, watcherSecret := h.createWebhook(h.adminKey, rcv.URL+"/watch", "webhook.disabled")
	rcv.expect("/a", secret, 500)
	rcv.expect("/watch", watcherSecret)
	path := fmt.Sprintf("/api/v1/webhooks/%d", id)

	// Validated like create.
	for _, c := range []struct {
		body     map[string]any
		location string
	}{
		{map[string]any{"url": "http://hooks.example.com/x"}, "body.url"},
		{map[string]any{"event_types": []string{}}, "body.event_types"},
		{map[string]any{"event_types": []string{"sent"}}, "body.event_types[0]"},
		{map[string]any{"event_types": []string{"bounced", "bounced"}}, "body.event_types"},
		{map[string]any{"status": "paused"}, "body.status"},
	} {
		r := h.do("PATCH", path, h.adminKey, c.body)
		r.expectError(t, 422, "validation_failed")
		if string(r.Raw) == "" || !containsLocation(r.Raw, c.location) {
			t.Errorf("%v: %s", c.body, r.Raw)
		}
	}
	h.do("PATCH", "/api/v1/webhooks/999999", h.adminKey, map[string]any{"status": "disabled"}).expectError(t, 404, "not_found")
	_, otherKey := h.newOrg("other")
	h.do("PATCH", path, otherKey, map[string]any{"status": "disabled"}).expectError(t, 404, "not_found")

	w := h.do("PATCH", path, h.adminKey, map[string]any{"event_types": []string{"delivered", "domain.verified"}}).data(t, 200)["webhook"].(map[string]any)
	if fmt.Sprint(w["event_types"]) != "[delivered domain.verified]" || w["status"] != "enabled" || w["disabled_reason"] != nil {
		t.Fatalf("patched types: %v", w)
	}

	// A delivery waiting for its next attempt stops when the webhook is disabled.
	dID := h.sendTest(id, nil)
	rcv.waitFor(t, dID, 1)
	testenv.Eventually(t, 10*time.Second, "first attempt logged", func() bool {
		_, attempts := h.deliveryStatus(id, dID)
		return len(attempts) == 1
	})
	w = h.do("PATCH", path, h.adminKey, map[string]any{"status": "disabled"}).data(t, 200)["webhook"].(map[string]any)
	if w["status"] != "disabled" || w["disabled_reason"] != "manual" || w["disabled_at"] == nil {
		t.Fatalf("disabled: %v", w)
	}
	if s, _ := h.deliveryStatus(id, dID); s != "failed" {
		t.Fatalf("pending delivery is %s after the disable", s)
	}
	testenv.Eventually(t, 10*time.Second, "workflow cancelled", func() bool {
		desc, err := h.temporal.DescribeWorkflowExecution(t.Context(), delivery.WorkflowID(dID), "")
		return err == nil && desc.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED
	})
	h.do("POST", path+"/test", h.adminKey, nil).expectError(t, 409, "conflict")

	// The other webhook hears of it, once, even when disabled is asked twice.
	h.do("PATCH", path, h.adminKey, map[string]any{"status": "disabled"}).data(t, 200)
	testenv.Eventually(t, 30*time.Second, "webhook.disabled delivered", func() bool { return len(rcv.requestsTo("/watch")) == 1 })
	time.Sleep(time.Second)
	got := rcv.requestsTo("/watch")
	if len(got) != 1 || got[0].SigError != "" || got[0].Header.Get("X-Service-Event") != "webhook.disabled" {
		t.Fatalf("watcher got %+v", got)
	}
	var body struct {
		EventType string `json:"event_type"`
		Data      struct {
			WebhookID int64  `json:"webhook_id"`
			Reason    string `json:"reason"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(got[0].Body), &body); err != nil || body.EventType != "webhook.disabled" || body.Data.WebhookID != id || body.Data.Reason != "manual" {
		t.Fatalf("webhook.disabled body %s (%v)", got[0].Body, err)
	}
	if list := h.deliveries(watcher, "")["deliveries"].([]any); len(list) != 1 || list[0].(map[string]any)["test"] != false {
		t.Fatalf("watcher log %v", list)
	}

	// Enabling clears the reason; a new URL is used from then on.
	rcv.expect("/b", secret)
	w = h.do("PATCH", path, h.adminKey, map[string]any{"status": "enabled", "url": rcv.URL + "/b"}).data(t, 200)["webhook"].(map[string]any)
	if w["status"] != "enabled" || w["disabled_reason"] != nil || w["disabled_at"] != nil || w["url"] != rcv.URL+"/b" {
		t.Fatalf("enabled: %v", w)
	}
	h.waitStatus(id, h.sendTest(id, nil), "delivered")
}

// requestsTo returns what arrived at a path.
func (r *receiver) requestsTo(path string) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, g := range r.got {
		if g.Path == path {
			out = append(out, g)
		}
	}
	return out
}

func containsLocation(raw []byte, location string) bool {
	var e struct {
		Error struct {
			Details []struct {
				Location string `json:"location"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return false
	}
	for _, d := range e.Error.Details {
		if d.Location == location {
			return true
		}
	}
	return false
}
