package api_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/onboarding"
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
		domainID, uuid.NewString())
	unanswered := h.storeEmail(ctx, domainID, uuid.NewString())
	young := h.storeEmail(ctx, domainID, uuid.NewString())
	if _, err := h.store.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", time.Now().Add(-3*time.Minute)).
		Where("id IN (?)", bun.List([]string{started, answered, unanswered})).Exec(ctx); err != nil {
		t.Fatal(err)
	}

	// The unanswered email is old by its created_at, which is the clock of
	// the host that stored it: the first pass notes it, and removes it only
	// once the database's clock has gone on by unstartedAge.
	startedNow, removed, err := h.api.SweepUnstartedEmails(ctx)
	if err != nil || startedNow != 1 || removed != 0 {
		t.Fatalf("first sweep started %d and removed %d (%v), want 1 and 0", startedNow, removed, err)
	}
	if got := h.do("GET", "/api/v1/emails/"+unanswered, h.adminKey, nil).Status; got != 200 {
		t.Fatalf("GET the unanswered email after the first pass: %d, want 200", got)
	}
	h.ageUnstartedSince(unanswered, 3*time.Minute)
	startedNow, removed, err = h.api.SweepUnstartedEmails(ctx)
	if err != nil || startedNow != 0 || removed != 1 {
		t.Fatalf("sweep started %d and removed %d (%v), want 0 and 1", startedNow, removed, err)
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

// ageUnstartedSince moves back the moment a sweep first found the email
// unstarted, as if the database's clock had gone on by age since.
func (h *harness) ageUnstartedSince(id string, age time.Duration) {
	h.t.Helper()
	if _, err := h.store.DB.NewUpdate().Model((*store.Email)(nil)).Set("unstarted_since = unstarted_since - make_interval(secs => ?)", age.Seconds()).
		Where("id = ?", id).Where("unstarted_since IS NOT NULL").Exec(context.Background()); err != nil {
		h.t.Fatal(err)
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

// Emails that wait for their time (scheduled, up to 30 days) or were
// canceled stay unaccepted with a workflow that exists. However many there
// are, they do not keep the sweep from an email whose workflow never
// started: each is asked about until its workflow is seen, canceled ones not
// at all. A canceled email whose workflow is gone (Temporal's retention
// removed the closed run) is neither removed nor started again.
func TestSweepIsNotStarvedByScheduledAndCanceledEmails(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "sweep.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")

	// 180 scheduled emails, their workflows started (no worker runs them:
	// they wait as a scheduled email's would); 70 of them then canceled.
	at := time.Now().Add(24 * time.Hour).Format(time.RFC3339)
	var waiting []string
	for range 2 {
		batch := make([]map[string]any, 90)
		for i := range batch {
			batch[i] = map[string]any{"from": "news@sweep.example", "to": []string{"a@example.org"}, "subject": "later", "text": "hello", "scheduled_at": at}
		}
		res := h.do("POST", "/api/v1/emails/batch", sendKey, batch)
		if res.Status != 202 {
			t.Fatalf("batch: %d %s", res.Status, res.Raw)
		}
		for _, e := range res.Body["data"].(map[string]any)["emails"].([]any) {
			waiting = append(waiting, e.(map[string]any)["id"].(string))
		}
	}
	for _, id := range waiting[:70] {
		if err := h.store.CancelEmail(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// Canceled emails whose closed workflow Temporal no longer knows, one
	// answered, one not: older than all the others.
	answeredCtx := store.WithCommitHook(ctx, func(context.Context, bun.Tx) error { return nil })
	canceledGone := []string{
		h.storeScheduledEmail(answeredCtx, domainID, uuid.NewString()),
		h.storeScheduledEmail(ctx, domainID, uuid.NewString()),
	}
	for _, id := range canceledGone {
		if err := h.store.CancelEmail(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// What a killed API process leaves, newer than the others.
	answered := h.storeEmail(answeredCtx, domainID, uuid.NewString())
	unanswered := h.storeEmail(ctx, domainID, uuid.NewString())
	for _, aged := range []struct {
		ids []string
		age time.Duration
	}{{canceledGone, 20 * time.Minute}, {waiting, 10 * time.Minute}, {[]string{answered, unanswered}, 3 * time.Minute}} {
		if _, err := h.store.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", time.Now().Add(-aged.age)).
			Where("id IN (?)", bun.List(aged.ids)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The first pass sees 100 of the 110 scheduled emails' workflows; the
	// next one the 10 left and the two emails that never started (the
	// unanswered one is removed by the pass after, unstartedAge later).
	total := 0
	for pass := range 3 {
		if pass == 2 {
			h.ageUnstartedSince(unanswered, 3*time.Minute)
		}
		started, removed, err := h.api.SweepUnstartedEmails(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", pass+1, err)
		}
		if pass == 1 && (started != 1 || removed != 0) {
			t.Errorf("pass 2 started %d and removed %d, want 1 and 0", started, removed)
		}
		if pass == 2 && (started != 0 || removed != 1) {
			t.Errorf("pass 3 started %d and removed %d, want 0 and 1", started, removed)
		}
		total += started + removed
	}
	if total != 2 {
		t.Errorf("three passes started or removed %d emails, want 2", total)
	}
	for id, want := range map[string]int{answered: 200, unanswered: 404, canceledGone[0]: 200, canceledGone[1]: 200} {
		if got := h.do("GET", "/api/v1/emails/"+id, h.adminKey, nil).Status; got != want {
			t.Errorf("GET email %s: %d, want %d", id, got, want)
		}
	}
	if _, err := h.temporal.DescribeWorkflowExecution(ctx, "email-delivery:"+answered, ""); err != nil {
		t.Errorf("the answered email's workflow: %v", err)
	}
	var notFound *serviceerror.NotFound
	for _, id := range canceledGone {
		if _, err := h.temporal.DescribeWorkflowExecution(ctx, "email-delivery:"+id, ""); !errors.As(err, &notFound) {
			t.Errorf("a canceled email's workflow was started again: %v", err)
		}
	}
	// Every email the sweep saw a workflow of is marked, canceled ones are
	// not looked at, and the next pass asks about nothing.
	if n, err := h.store.DB.NewSelect().Model((*store.Email)(nil)).Where("workflow_seen_at IS NOT NULL").Count(ctx); err != nil || n != 111 {
		t.Errorf("%d emails marked as seen (%v), want 111 (110 scheduled, the started one)", n, err)
	}
	if left, err := h.store.UnacceptedEmailsBefore(ctx, time.Now(), 1000); err != nil || len(left) != 0 {
		t.Errorf("still to ask about: %d emails (%v)", len(left), err)
	}
}

// storeScheduledEmail stores a scheduled email as the API does before it
// starts the workflow.
func (h *harness) storeScheduledEmail(ctx context.Context, domainID int64, id string) string {
	h.t.Helper()
	at := time.Now().Add(time.Hour).UTC()
	e := &store.Email{ID: id, OrganizationID: h.orgID, DomainID: domainID, FromAddress: "news@sweep.example",
		To: store.AddressList{"b@example.org"}, Subject: "hi", Content: []byte(`{}`), ScheduledAt: &at}
	if err := h.store.CreateEmail(ctx, e, []string{"b@example.org"}); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// An email id in any form uuid.Parse accepts names the email: the API
// passes its canonical form on, since PostgreSQL's uuid type refuses
// urn:uuid:... (each route was a 500) and Temporal names the workflow by the
// exact string.
func TestEmailIDsInAnyUUIDForm(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "sweep.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	id := h.storeEmail(ctx, domainID, "0193a5c4-2f00-7000-8000-00000000abcd")
	// Events are found by the text of the email's id: another form found none.
	ev := event("uuid-forms-1", "sweep.example", "delivered")
	ev["message_id"] = id
	post(t, h.internal().URL, "/internal/v1/events", internalToken, ev).data(t, 202)
	later := map[string]any{"scheduled_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	for _, form := range []string{"urn:uuid:" + id, "URN:UUID:" + id, strings.ToUpper(id), "%7B" + id + "%7D", strings.ReplaceAll(id, "-", "")} {
		t.Run(form, func(t *testing.T) {
			e := h.do("GET", "/api/v1/emails/"+form, sendKey, nil).data(t, 200)["email"].(map[string]any)
			if e["id"] != id {
				t.Fatalf("GET answers the email %v, want %s", e["id"], id)
			}
			if events := h.do("GET", "/api/v1/emails/"+form+"/events", sendKey, nil).data(t, 200)["events"].([]any); len(events) != 1 {
				t.Fatalf("the email has %d events, want 1", len(events))
			}
			// Found, and not scheduled (it has no workflow).
			h.do("POST", "/api/v1/emails/"+form+"/cancel", sendKey, nil).expectError(t, 409, "email_not_scheduled")
			h.do("PATCH", "/api/v1/emails/"+form, sendKey, later).expectError(t, 409, "email_not_scheduled")
		})
	}
	// Another email's id in the urn form is still not found.
	ghost := "urn:uuid:0193a5c4-2f00-7000-8000-00000000ffff"
	h.do("GET", "/api/v1/emails/"+ghost, sendKey, nil).expectError(t, 404, "not_found")
	h.do("GET", "/api/v1/emails/"+ghost+"/events", sendKey, nil).expectError(t, 404, "not_found")
	h.do("POST", "/api/v1/emails/"+ghost+"/cancel", sendKey, nil).expectError(t, 404, "not_found")
	h.do("PATCH", "/api/v1/emails/"+ghost, sendKey, later).expectError(t, 404, "not_found")
	// An empty time is no time (a time just past means now, and sends).
	h.do("PATCH", "/api/v1/emails/"+id, sendKey, map[string]any{"scheduled_at": ""}).expectError(t, 422, "validation_failed")
}

// A domain whose API process died before its onboarding started stays
// pending with no run, as does a failed domain reopened while Temporal could
// not be reached. The sweep starts onboarding for such domains whose window
// opened within its horizon, once they are old enough, and leaves the
// others.
func TestSweepStartsOnboardingThatNeverStarted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()

	// Added through the API with an Idempotency-Key: onboarding starts, and a
	// retry gets the same domain, not 409 domain_exists.
	header := map[string]string{"Idempotency-Key": "add-1"}
	body := map[string]any{"domain": "added.example"}
	res := h.doAt(h.srv.URL, "POST", "/api/v1/domains", h.adminKey, body, header)
	if res.Status != 201 {
		t.Fatalf("add: %d %s", res.Status, res.Raw)
	}
	again := h.doAt(h.srv.URL, "POST", "/api/v1/domains", h.adminKey, body, header)
	if again.Status != 201 || string(again.Raw) != string(res.Raw) {
		t.Fatalf("retry: %d %s, want the first answer", again.Status, again.Raw)
	}

	// What a killed API process leaves: pending, no run; one within the
	// horizon, one too young, one beyond the horizon.
	// Ids far from the other tests' (they share the Temporal server, where
	// the runs are named by domain id).
	// A failed domain reopened by Verify domain while Temporal could not
	// be reached is pending with a new window and no run too.
	base := time.Now().UnixNano() % 1_000_000_000 * 10
	orphan := h.pendingDomainWithID(base+1, "orphan.example")
	young := h.pendingDomainWithID(base+2, "young.example")
	ancient := h.pendingDomainWithID(base+3, "ancient.example")
	reopened := h.pendingDomainWithID(base+4, "reopened.example")
	for id, age := range map[int64]struct{ created, window time.Duration }{
		orphan:   {3 * time.Minute, 3 * time.Minute},
		ancient:  {2 * time.Hour, 2 * time.Hour},
		reopened: {5 * 24 * time.Hour, 3 * time.Minute},
	} {
		if _, err := h.store.DB.NewUpdate().Model((*store.Domain)(nil)).Set("created_at = ?", time.Now().Add(-age.created)).
			Set("window_started_at = ?", time.Now().Add(-age.window)).Where("id = ?", id).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The reopened domain's last run has ended (its window failed).
	if err := onboarding.Start(ctx, h.temporal, h.orgID, onboarding.Input{DomainID: reopened}); err != nil {
		t.Fatal(err)
	}
	if err := h.temporal.TerminateWorkflow(ctx, onboarding.WorkflowID(reopened), "", "its window failed"); err != nil {
		t.Fatal(err)
	}

	started, err := h.api.SweepUnstartedOnboarding(ctx)
	if err != nil || started != 2 {
		t.Fatalf("sweep started %d (%v), want 2", started, err)
	}
	for id, want := range map[int64]bool{orphan: true, young: false, ancient: false, reopened: true} {
		desc, err := h.temporal.DescribeWorkflowExecution(ctx, fmt.Sprintf("domain-onboarding:%d", id), "")
		open := err == nil && desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		if open != want {
			t.Errorf("domain %d: onboarding run open=%v, want %v", id, open, want)
		}
	}
	if started, err := h.api.SweepUnstartedOnboarding(ctx); err != nil || started != 0 {
		t.Errorf("a second sweep started %d (%v)", started, err)
	}
}

// A domain whose run never started is reached behind more than a batch of
// pending domains whose runs are open: the sweep walks them all, where it
// looked at the oldest batch only and never got past it.
func TestOnboardingSweepWalksPastOpenRuns(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	base := time.Now().UnixNano()%1_000_000_000*10 + 5_000_000_000
	window := time.Now().Add(-3 * time.Minute)
	pending := func(id int64) {
		h.pendingDomainWithID(id, fmt.Sprintf("d%d.example", id))
		if _, err := h.store.DB.NewUpdate().Model((*store.Domain)(nil)).Set("window_started_at = ?", window).Where("id = ?", id).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range int64(110) {
		pending(base + i)
		if err := onboarding.Start(ctx, h.temporal, h.orgID, onboarding.Input{DomainID: base + i}); err != nil {
			t.Fatal(err)
		}
	}
	orphan := base + 200
	pending(orphan)
	if started, err := h.api.SweepUnstartedOnboarding(ctx); err != nil || started != 1 {
		t.Fatalf("sweep started %d (%v), want the one domain without a run", started, err)
	}
	if _, err := h.temporal.DescribeWorkflowExecution(ctx, onboarding.WorkflowID(orphan), ""); err != nil {
		t.Fatalf("the orphan's onboarding: %v", err)
	}
}

// pendingDomainWithID stores a pending domain with the given id, as an API
// process does before it starts onboarding.
func (h *harness) pendingDomainWithID(id int64, name string) int64 {
	h.t.Helper()
	d := &store.Domain{ID: id, OrganizationID: h.orgID, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: fmt.Sprintf("token%d", id)}
	if err := h.store.CreateDomain(context.Background(), d, nil); err != nil {
		h.t.Fatal(err)
	}
	return d.ID
}

// A DELETE that could not reach Temporal (503) leaves the domain gone for
// its customer and "deleting"; a client that does not repeat the DELETE
// would leave its keys published for ever. Once old enough, the sweep
// finishes it: the deletion workflow runs and the domain is deleted.
func TestSweepFinishesDeletionsTemporalMissed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	base := time.Now().UnixNano() % 1_000_000_000 * 10
	missed := h.pendingDomainWithID(base+1, "missed.example")
	recent := h.pendingDomainWithID(base+2, "recent.example")
	for id, age := range map[int64]time.Duration{missed: 5 * time.Minute, recent: 0} {
		if _, err := h.store.DeleteDomainForCustomer(ctx, h.orgID, id); err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.DB.NewUpdate().Model((*store.Domain)(nil)).Set("deleted_at = ?", time.Now().Add(-age)).
			Where("id = ?", id).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := h.api.SweepUnfinishedDeletions(ctx); err != nil || n != 1 {
		t.Fatalf("the sweep finished %d deletions (%v), want 1", n, err)
	}
	for id, want := range map[int64]string{missed: store.DomainDeleted, recent: store.DomainDeleting} {
		d, err := h.store.DomainByID(ctx, id)
		if err != nil || d.Status != want {
			t.Errorf("domain %d: %+v, %v; want %s", id, d, err, want)
		}
	}
	if _, err := h.temporal.DescribeWorkflowExecution(ctx, fmt.Sprintf("domain-deletion:%d", missed), ""); err != nil {
		t.Errorf("the deletion workflow of domain %d: %v", missed, err)
	}
}
