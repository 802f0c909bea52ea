package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
)

// An API process killed between storing an email and starting its workflow
// leaves a queued email nothing will ever send. The sweep removes it once it
// is old enough, with its recipients, and keeps emails whose workflow exists
// and emails too young to judge.
func TestSweepRemovesEmailsWhoseWorkflowNeverStarted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "sweep.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")

	// Sent through the API: its workflow starts (no worker runs it here).
	res := h.do("POST", "/api/v1/emails", sendKey, map[string]any{
		"from": "news@sweep.example", "to": []string{"a@example.org"}, "subject": "hi", "text": "hello",
	})
	if res.Status != 202 {
		t.Fatalf("send: %d %s", res.Status, res.Raw)
	}
	started := res.Body["data"].(map[string]any)["email"].(map[string]any)["id"].(string)

	// What a killed API process leaves: stored, never started.
	orphan := h.storeEmail(domainID, "0193a000-0000-7000-8000-000000000001")
	young := h.storeEmail(domainID, "0193a000-0000-7000-8000-000000000002")
	if _, err := h.store.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", time.Now().Add(-11*time.Minute)).
		Where("id IN (?)", bun.In([]string{started, orphan})).Exec(ctx); err != nil {
		t.Fatal(err)
	}

	removed, err := h.api.SweepUnstartedEmails(ctx)
	if err != nil || removed != 1 {
		t.Fatalf("sweep removed %d (%v), want 1", removed, err)
	}
	for id, want := range map[string]int{started: 200, orphan: 404, young: 200} {
		if got := h.do("GET", "/api/v1/emails/"+id, h.adminKey, nil).Status; got != want {
			t.Errorf("GET email %s: %d, want %d", id, got, want)
		}
	}
	if n, err := h.store.DB.NewSelect().Model((*store.EmailRecipient)(nil)).Where("email_id = ?", orphan).Count(ctx); err != nil || n != 0 {
		t.Errorf("the removed email's recipients: %d rows (%v)", n, err)
	}
	if removed, err := h.api.SweepUnstartedEmails(ctx); err != nil || removed != 0 {
		t.Errorf("a second sweep removed %d (%v)", removed, err)
	}
}

// storeEmail stores a queued email as the API does before it starts the
// workflow.
func (h *harness) storeEmail(domainID int64, id string) string {
	h.t.Helper()
	e := &store.Email{ID: id, OrganizationID: h.orgID, DomainID: domainID, FromAddress: "news@sweep.example",
		To: store.AddressList{"b@example.org"}, Subject: "hi", Content: []byte(`{}`)}
	if err := h.store.CreateEmail(context.Background(), e, []string{"b@example.org"}); err != nil {
		h.t.Fatal(err)
	}
	return id
}
