package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
)

// An API process killed between storing an email and starting its workflow
// leaves a queued email nothing will ever send. Once it is old enough, the
// sweep starts the workflow of an email whose answer committed with it (the
// client holds its id) and removes any other, with its recipients; it keeps
// emails whose workflow exists and emails too young to judge.
func TestSweepFinishesEmailsWhoseWorkflowNeverStarted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "sweep.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")

	// Sent through the API with an Idempotency-Key: its workflow starts (no
	// worker runs it here), and the retry gets the same email.
	body := map[string]any{"from": "news@sweep.example", "to": []string{"a@example.org"}, "subject": "hi", "text": "hello"}
	header := map[string]string{"Idempotency-Key": "sweep-1"}
	res := h.doAt(h.srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	if res.Status != 202 {
		t.Fatalf("send: %d %s", res.Status, res.Raw)
	}
	started := res.Body["data"].(map[string]any)["email"].(map[string]any)["id"].(string)
	again := h.doAt(h.srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	if again.Status != 202 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Raw) != string(res.Raw) {
		t.Fatalf("retry: %d replayed=%q %s, want the first answer", again.Status, again.Header.Get("Idempotent-Replayed"), again.Raw)
	}

	// What a killed API process leaves: stored, never started; one answered
	// (its answer committed with it), one not.
	answered := h.storeEmail(store.WithCommitHook(ctx, func(context.Context, bun.Tx) error { return nil }),
		domainID, "0193a000-0000-7000-8000-000000000001")
	unanswered := h.storeEmail(ctx, domainID, "0193a000-0000-7000-8000-000000000002")
	young := h.storeEmail(ctx, domainID, "0193a000-0000-7000-8000-000000000003")
	if _, err := h.store.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", time.Now().Add(-3*time.Minute)).
		Where("id IN (?)", bun.List([]string{started, answered, unanswered})).Exec(ctx); err != nil {
		t.Fatal(err)
	}

	startedNow, removed, err := h.api.SweepUnstartedEmails(ctx)
	if err != nil || startedNow != 1 || removed != 1 {
		t.Fatalf("sweep started %d and removed %d (%v), want 1 and 1", startedNow, removed, err)
	}
	for id, want := range map[string]int{started: 200, answered: 200, unanswered: 404, young: 200} {
		if got := h.do("GET", "/api/v1/emails/"+id, h.adminKey, nil).Status; got != want {
			t.Errorf("GET email %s: %d, want %d", id, got, want)
		}
	}
	if _, err := h.temporal.DescribeWorkflowExecution(ctx, "email-delivery:"+answered, ""); err != nil {
		t.Errorf("the answered email's workflow: %v", err)
	}
	if n, err := h.store.DB.NewSelect().Model((*store.EmailRecipient)(nil)).Where("email_id = ?", unanswered).Count(ctx); err != nil || n != 0 {
		t.Errorf("the removed email's recipients: %d rows (%v)", n, err)
	}
	if startedNow, removed, err := h.api.SweepUnstartedEmails(ctx); err != nil || startedNow+removed != 0 {
		t.Errorf("a second sweep started %d and removed %d (%v)", startedNow, removed, err)
	}
}

// storeEmail stores a queued email as the API does before it starts the
// workflow.
func (h *harness) storeEmail(ctx context.Context, domainID int64, id string) string {
	h.t.Helper()
	e := &store.Email{ID: id, OrganizationID: h.orgID, DomainID: domainID, FromAddress: "news@sweep.example",
		To: store.AddressList{"b@example.org"}, Subject: "hi", Content: []byte(`{}`)}
	if err := h.store.CreateEmail(ctx, e, []string{"b@example.org"}); err != nil {
		h.t.Fatal(err)
	}
	return id
}
