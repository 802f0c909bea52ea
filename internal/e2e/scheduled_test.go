package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/mailyard/mailyard/internal/testenv"
)

// Scheduled and batch sending through the real processes, in real time: an
// email scheduled 3 s ahead is scheduled, then delivered after its time; a
// rescheduled one moves; a canceled one sends nothing, and a second cancel
// answers it again, as do two at once; a cancel or reschedule after sending is 409
// email_not_scheduled; a cancel of an email whose workflow never started
// starts it to cancel it; a batch of 100 is
// stored at once and all delivered, and an invalid batch sends nothing.
func TestScheduledAndBatchSending(t *testing.T) {
	t.Parallel()
	mx := startMX(t)
	s := startStack(t, topology{env: append(mx.env(), "MAILYARD_VERIFY_SCHEDULE=1s/60s", "MAILYARD_RATE_LIMIT=off")})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	domainID, _, _ := verifiedDomain(t, s, "shop.example")
	key := s.api().sendKey(domainID)
	api := s.api().as(key)
	body := func(to, at string) map[string]any {
		b := map[string]any{"from": "billing@shop.example", "to": to, "subject": "Scheduled", "text": "Hello."}
		if at != "" {
			b["scheduled_at"] = at
		}
		return b
	}
	get := api.email

	sendAt := time.Now().Add(3 * time.Second)
	on := api.send(body("on-time@rcpt.example", sendAt.Format(time.RFC3339Nano)))
	if on.Status != "scheduled" || on.ScheduledAt == nil {
		t.Fatalf("scheduled answer %+v", on)
	}
	moved := api.send(body("moved@rcpt.example", time.Now().Add(time.Hour).Format(time.RFC3339))).ID
	canceled := api.send(body("canceled@rcpt.example", time.Now().Add(2*time.Second).Format(time.RFC3339Nano))).ID
	// Moved to a moment just past (a client's clock behind): sent now, as
	// a send with that time would be.
	sentNow := api.send(body("now@rcpt.example", time.Now().Add(time.Hour).Format(time.RFC3339))).ID
	api.reschedule(sentNow, time.Now().Add(-time.Minute).Format(time.RFC3339))

	if got := api.cancelEmail(canceled); got != "canceled" {
		t.Fatalf("canceled %v", got)
	}
	api.reschedule(moved, time.Now().Add(2*time.Second).Format(time.RFC3339Nano))
	if get(on.ID).Status != "scheduled" {
		t.Fatal("the scheduled email is not scheduled before its time")
	}
	if len(mx.received("on-time@rcpt.example")) != 0 {
		t.Fatal("a scheduled email was sent before its time")
	}
	for _, id := range []string{on.ID, moved, sentNow} {
		testenv.Eventually(t, 30*time.Second, "scheduled email sent", func() bool { return get(id).Status == "sent" })
	}
	if len(mx.received("now@rcpt.example")) != 1 {
		t.Fatal("the email moved to now did not arrive")
	}
	if len(mx.received("on-time@rcpt.example")) != 1 || time.Now().Before(sendAt) {
		t.Fatal("the scheduled email did not arrive after its time")
	}
	if len(mx.received("moved@rcpt.example")) != 1 {
		t.Fatal("the rescheduled email did not arrive")
	}
	time.Sleep(time.Second)
	if len(mx.received("canceled@rcpt.example")) != 0 || get(canceled).Status != "canceled" {
		t.Fatal("a canceled email was sent")
	}
	// A second cancel answers the canceled email again (a client whose
	// first got no answer sends it again); moving or canceling a sent
	// email is refused.
	if got := api.cancelEmail(canceled); got != "canceled" {
		t.Fatalf("canceled again: %v", got)
	}
	// Two cancels at once, while the first one's step cannot store the
	// email yet (its row is locked here), both answer the canceled email:
	// the second joins the first instead of being refused by a workflow
	// that has already taken a cancel.
	twice := api.send(body("twice@rcpt.example", time.Now().Add(time.Hour).Format(time.RFC3339))).ID
	st := testenv.OpenStore(t, s.databaseURL)
	lock, err := st.DB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(context.Background(), "SELECT id FROM emails WHERE id = ? FOR UPDATE", twice); err != nil {
		t.Fatal(err)
	}
	answers := make(chan string, 2)
	for range 2 {
		go func() {
			status, raw, err := api.send1("POST", "/api/v1/emails/"+twice+"/cancel", nil, nil)
			answers <- fmt.Sprintf("%d %s %v", status, raw, err)
		}()
	}
	time.Sleep(2 * time.Second) // both cancels reach the workflow
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if a := <-answers; !strings.HasPrefix(a, "200 ") || !strings.Contains(a, `"status":"canceled"`) {
			t.Fatalf("a cancel sent twice at once: %s", a)
		}
	}
	for _, call := range []struct{ method, path string }{{"POST", "/api/v1/emails/" + moved + "/cancel"}, {"PATCH", "/api/v1/emails/" + moved}} {
		if status, code, e := api.refused(call.method, call.path, map[string]any{"scheduled_at": time.Now().Add(time.Hour).Format(time.RFC3339)}); status != 409 ||
			code != "email_not_scheduled" {
			t.Fatalf("%s %s: %d %s", call.method, call.path, status, e)
		}
	}
	// A scheduled email answered whose workflow is not there (a batch's
	// starts ran out of time, and the sweep has not started it yet; here
	// its run is deleted, and it is marked answered as the batch marks
	// such an email) is canceled all the same: its workflow is started to
	// be asked, and the sweep finds nothing left to send.
	unstarted := api.sendBatch([]map[string]any{body("unstarted@rcpt.example", time.Now().Add(3*time.Second).Format(time.RFC3339Nano))})[0].ID
	if _, err := s.temporalC.WorkflowService().DeleteWorkflowExecution(context.Background(), &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: s.namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: "email-delivery:" + unstarted},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkEmailsAnswered(context.Background(), []string{unstarted}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the run deleted", func() bool {
		_, err := s.temporalC.DescribeWorkflowExecution(context.Background(), "email-delivery:"+unstarted, "")
		return err != nil
	})
	if got := api.cancelEmail(unstarted); got != "canceled" {
		t.Fatalf("an email without its workflow: %v", got)
	}
	time.Sleep(4 * time.Second)
	if len(mx.received("unstarted@rcpt.example")) != 0 || get(unstarted).Status != "canceled" {
		t.Fatal("an email canceled before its workflow started was sent")
	}
	// Validation of scheduled_at.
	for at, want := range map[string]string{
		"2026-12-01T09:00:00": "time-zone offset",
		time.Now().Add(31 * 24 * time.Hour).Format(time.RFC3339): "30 days",
		time.Now().Add(-10 * time.Minute).Format(time.RFC3339):   "in the past",
	} {
		status, _, e := api.refused("POST", "/api/v1/emails", body("x@rcpt.example", at))
		if status != 422 || !strings.Contains(e, "body.scheduled_at") || !strings.Contains(e, want) {
			t.Fatalf("scheduled_at %q: %d %s", at, status, e)
		}
	}

	// A batch with one invalid item sends nothing; 101 items are refused.
	items := make([]map[string]any, 100)
	for i := range items {
		items[i] = body(fmt.Sprintf("batch%d@rcpt.example", i), "")
	}
	bad := slices.Clone(items[:5])
	bad[3] = map[string]any{"from": "billing@shop.example", "to": "not an address", "subject": "x", "text": "x"}
	if status, _, e := api.refused("POST", "/api/v1/emails/batch", bad); status != 422 || !strings.Contains(e, "body[3].to") {
		t.Fatalf("invalid batch: %d %s", status, e)
	}
	if status, _, _ := api.refused("POST", "/api/v1/emails/batch", append(slices.Clone(items), items[0])); status != 422 {
		t.Fatalf("101 items: %d", status)
	}
	before := len(api.emails("?limit=100").Emails)
	if before != 6 {
		t.Fatalf("%d emails after invalid batches, want the 6 scheduled ones", before)
	}
	// The answer comes once every workflow of the batch has started.
	began := time.Now()
	queued := api.sendBatch(items)
	t.Logf("a batch of 100: stored and every workflow started in %s", time.Since(began).Round(time.Millisecond))
	if len(queued) != 100 {
		t.Fatalf("%d emails queued", len(queued))
	}
	for i, q := range queued {
		e := get(q.ID)
		if e.To[0] != fmt.Sprintf("batch%d@rcpt.example", i) || e.Source != "batch" {
			t.Fatalf("item %d is %+v", i, e)
		}
	}
	// With an Idempotency-Key, a batch is one request: the same again gets
	// the same ids, and stores nothing more.
	first, err := api.postWithKey("/api/v1/emails/batch", "batch-key-1", items[:3])
	if err != nil || first.status != 202 {
		t.Fatalf("keyed batch: %v %+v", err, first)
	}
	again, err := api.postWithKey("/api/v1/emails/batch", "batch-key-1", items[:3])
	if err != nil || again.status != 202 || !again.replayed || !bytes.Equal(again.body, first.body) {
		t.Fatalf("the same keyed batch again: %v %+v, first %s", err, again, first.body)
	}
	n, cursor := 0, ""
	for {
		page := api.emails("?limit=100" + cursor)
		n += len(page.Emails)
		if page.NextCursor == "" {
			break
		}
		cursor = "&cursor=" + page.NextCursor
	}
	if n != 6+100+3 {
		t.Fatalf("%d emails after a keyed batch sent twice, want %d", n, 6+100+3)
	}
	testenv.Eventually(t, 2*time.Minute, "the batch delivered", func() bool {
		for i := range items {
			want := 1
			if i < 3 {
				want = 2 // also in the keyed batch
			}
			if len(mx.received(fmt.Sprintf("batch%d@rcpt.example", i))) != want {
				return false
			}
		}
		return true
	})
}
