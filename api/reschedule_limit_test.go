package api_test

import (
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/email"
)

// An email moved as often as an email may be refuses the next move with
// 409 conflict, saying what to do, and can still be canceled: Temporal
// refuses every update of a run past 2,000 accepted ones, a cancel too.
func TestMovesOfAnEmailAreLimited(t *testing.T) {
	defer func(n int) { email.MaxReschedules = n }(email.MaxReschedules)
	email.MaxReschedules = 2
	h := newHarness(t)
	// A Temporal of its own: the worker takes no other test's emails.
	tc, base := h.onOwnTemporal()
	w := sdkworker.New(tc, email.TaskQueue, sdkworker.Options{})
	worker.RegisterEmails(w, &activities.Emails{Store: h.store})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	domainID := h.domainInStatus(h.orgID, "moves.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	at := func(d time.Duration) map[string]any {
		return map[string]any{"scheduled_at": time.Now().Add(d).UTC().Format(time.RFC3339)}
	}
	body := map[string]any{"from": "a@moves.example", "to": "b@rcpt.example", "subject": "s", "text": "t"}
	for k, v := range at(time.Hour) {
		body[k] = v
	}
	id := h.doAt(base, "POST", "/api/v1/emails", sendKey, body, nil).data(t, 202)["email"].(map[string]any)["id"].(string)
	path := "/api/v1/emails/" + id
	for i := range email.MaxReschedules {
		h.doAt(base, "PATCH", path, sendKey, at(time.Duration(i+2)*time.Hour), nil).data(t, 200)
	}
	refused := h.doAt(base, "PATCH", path, sendKey, at(10*time.Hour), nil)
	refused.expectError(t, 409, "conflict")
	if e := h.doAt(base, "POST", path+"/cancel", sendKey, nil, nil).data(t, 200)["email"].(map[string]any); e["status"] != "canceled" {
		t.Fatalf("canceled email %v", e)
	}
}
