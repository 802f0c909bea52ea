package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// serverThrough is an API server on the harness's store whose Temporal
// client goes through interceptor; startTimeout overrides the API's 30 s
// (0: not).
func (h *harness) serverThrough(interceptor grpc.UnaryClientInterceptor, startTimeout time.Duration) *httptest.Server {
	h.t.Helper()
	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(h.t),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(interceptor)}}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(tc.Close)
	return httpServer(h.t, api.New(api.Deps{Config: h.cfg, Store: h.store, Temporal: tc, Logger: h.logger, StartTimeout: startTimeout}).Handler())
}

// beforeStarts is a gRPC client interceptor that runs before ahead of each
// StartWorkflowExecution: an error of it is the start's answer, nil lets the
// start go on.
func beforeStarts(before func(ctx context.Context) error) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := req.(*workflowservice.StartWorkflowExecutionRequest); ok {
			if err := before(ctx); err != nil {
				return err
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// loseStartAnswers is a gRPC client interceptor whose starts reach the
// server and create their runs, and whose answers are lost: each start
// returns an error the SDK does not retry.
func loseStartAnswers(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := req.(*workflowservice.StartWorkflowExecutionRequest); !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return err
	}
	return status.Error(codes.FailedPrecondition, "the answer was lost")
}

// refuseStart answers a start with an error the SDK does not retry.
func refuseStart(context.Context) error {
	return status.Error(codes.FailedPrecondition, "the start failed")
}

// A start that fails on the API's side only (its answer lost, e.g. after
// the 30 s timeout) while Temporal did create the run and the worker's first
// step has already accepted the email: the email is on its way, so the
// answer is the 202 (the same a retry with the Idempotency-Key replays), not
// a 503 "nothing was sent" that would make the client send it twice. When
// the run has not taken the email yet, the email is removed and the answer
// is 503, as before.
func TestSendAnswersTheEmailWhenOnlyItsStartLookedFailed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "lost.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")

	// A real client of the real server whose StartWorkflowExecution answers
	// are lost on the way back; when accept is set, the worker's first step
	// (AcceptEmail) runs before the answer would have arrived.
	var accept atomic.Bool
	lose := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start, ok := req.(*workflowservice.StartWorkflowExecutionRequest)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		if accept.Load() {
			id := strings.TrimPrefix(start.GetWorkflowId(), "email-delivery:")
			if _, err := h.store.AcceptEmail(ctx, id, store.Acceptance{EnvelopeSender: "bounces+" + id + "@mail.lost.example", Recipients: 1}); err != nil {
				t.Errorf("AcceptEmail: %v", err)
			}
		}
		return status.Error(codes.DeadlineExceeded, "the answer was lost")
	}
	srv := h.serverThrough(lose, 0)
	emails := func() int64 {
		t.Helper()
		n, err := h.store.DB.NewSelect().Model((*store.Email)(nil)).Where("organization_id = ?", h.orgID).Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	body := map[string]any{"from": "news@lost.example", "to": []string{"a@example.org"}, "subject": "hi", "text": "hello"}

	// Accepted before the lost answer: 202 with the email, kept.
	accept.Store(true)
	header := map[string]string{"Idempotency-Key": "lost-1"}
	res := h.doAt(srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	if res.Status != 202 {
		t.Fatalf("send whose start only looked failed: %d %s, want 202", res.Status, res.Raw)
	}
	id := res.Body["data"].(map[string]any)["email"].(map[string]any)["id"].(string)
	if got := h.do("GET", "/api/v1/emails/"+id, h.adminKey, nil).Status; got != 200 {
		t.Fatalf("GET the email: %d", got)
	}
	if _, err := h.temporal.DescribeWorkflowExecution(ctx, "email-delivery:"+id, ""); err != nil {
		t.Fatalf("its workflow: %v", err)
	}
	// The client's retry (through a server whose starts succeed) replays the
	// answer: one email.
	again := h.doAt(h.srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	if again.Status != 202 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Raw) != string(res.Raw) {
		t.Fatalf("retry: %d replayed=%q %s, want the first answer", again.Status, again.Header.Get("Idempotent-Replayed"), again.Raw)
	}
	if n := emails(); n != 1 {
		t.Fatalf("%d emails stored, want 1", n)
	}

	// Not accepted yet: the email is removed (its run finds it gone) and the
	// answer is 503; the retry is the email that is sent.
	accept.Store(false)
	header = map[string]string{"Idempotency-Key": "lost-2"}
	h.doAt(srv.URL, "POST", "/api/v1/emails", sendKey, body, header).expectError(t, 503, "unavailable")
	if n := emails(); n != 1 {
		t.Fatalf("%d emails stored after the 503, want 1", n)
	}
	retry := h.doAt(h.srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	if retry.Status != 202 || retry.Header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("retry after the 503: %d replayed=%q %s, want a new 202", retry.Status, retry.Header.Get("Idempotent-Replayed"), retry.Raw)
	}
	if n := emails(); n != 2 {
		t.Fatalf("%d emails stored, want 2", n)
	}
}

// A send whose start failed and whose email could not be removed either
// (here: the database refuses the delete) keeps the email, which the sweep
// then finishes. With an Idempotency-Key its answer committed with it, so
// the sweep starts it: the answer is the 202, and the client's retry
// replays it. Before, the answer was forgotten and the client told to send
// again: the email went twice.
func TestSendWhoseEmailCannotBeRemovedIsAnswered(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "stuck.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	srv := h.serverThrough(beforeStarts(refuseStart), 0)
	for _, stmt := range []string{
		`CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'deletes refused'; END $$`,
		`CREATE TRIGGER refuse_delete BEFORE DELETE ON email_recipients FOR EACH ROW EXECUTE FUNCTION refuse_delete()`,
	} {
		if _, err := h.store.DB.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = h.store.DB.ExecContext(ctx, `DROP TRIGGER refuse_delete ON email_recipients`) })

	body := map[string]any{"from": "news@stuck.example", "to": []string{"a@example.org"}, "subject": "hi", "text": "hello"}
	header := map[string]string{"Idempotency-Key": "stuck-1"}
	res := h.doAt(srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	if res.Status != 202 {
		t.Fatalf("send whose email could not be removed: %d %s, want 202", res.Status, res.Raw)
	}
	again := h.doAt(srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	if again.Status != 202 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Raw) != string(res.Raw) {
		t.Fatalf("retry: %d replayed=%q %s, want the first answer", again.Status, again.Header.Get("Idempotent-Replayed"), again.Raw)
	}
	// Without a key nothing committed with the email: the sweep removes it,
	// and the 503 stands.
	h.doAt(srv.URL, "POST", "/api/v1/emails", sendKey, body, nil).expectError(t, 503, "unavailable")
	var answered []bool
	if err := h.store.DB.NewSelect().Model((*store.Email)(nil)).Column("answered").Where("organization_id = ?", h.orgID).
		Order("created_at").Scan(ctx, &answered); err != nil || len(answered) != 2 || !answered[0] || answered[1] {
		t.Fatalf("emails stored (answered): %v, %v; want one answered and one not", answered, err)
	}
}

// An idempotent request still running when Huma's body read time-out (5 s)
// has passed is not canceled, and the next request on its connection is
// served. Before, the deadline Huma set after the idempotency middleware
// had read the body ended net/http's background read: the request's context
// was canceled (here: the email removed and 503 while its start was under
// way) and the connection's next request failed at once.
func TestSlowIdempotentRequestIsNotCanceled(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "slow.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	srv := h.serverThrough(beforeStarts(func(context.Context) error { time.Sleep(6 * time.Second); return nil }), 0)
	body := map[string]any{"from": "news@slow.example", "to": []string{"a@example.org"}, "subject": "hi", "text": "hello"}
	if res := h.doAt(srv.URL, "POST", "/api/v1/emails", sendKey, body, map[string]string{"Idempotency-Key": "slow-1"}); res.Status != 202 {
		t.Fatalf("a send whose start took 6 s: %d %s, want 202", res.Status, res.Raw)
	}
	h.doAt(srv.URL, "GET", "/api/v1/emails", sendKey, nil, nil).data(t, 200)
}

// A batch's workflow starts share one start's time: with Temporal not
// answering, 100 emails started 16 at a time, each waiting its own time,
// kept the client seven times as long (past the server's write time-out in
// production), and a client that got no answer sent the batch again.
//
// While the starts run, no email of the batch is answered: a process that
// dies then leaves them to the sweep to remove, and the client's second
// batch is the only one sent. Those not started when the answer goes out
// are then marked answered, and the sweep starts them; those started need
// nothing.
func TestBatchStartsShareOneStartsTime(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "batch.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	answered := func() int {
		n, err := h.store.DB.NewSelect().Model((*store.Email)(nil)).Where("organization_id = ?", h.orgID).Where("answered").Count(context.Background())
		if err != nil {
			t.Error(err)
		}
		return int(n)
	}
	var whileStarting atomic.Int64
	whileStarting.Store(-1)
	hang := func(ctx context.Context) error {
		whileStarting.CompareAndSwap(-1, int64(answered()))
		<-ctx.Done()
		return ctx.Err()
	}
	const startTimeout = 2 * time.Second
	srv := h.serverThrough(beforeStarts(hang), startTimeout)
	batch := make([]map[string]any, 100)
	for i := range batch {
		batch[i] = map[string]any{"from": "news@batch.example", "to": fmt.Sprintf("r%d@example.org", i), "subject": "hi", "text": "hello"}
	}
	began := time.Now()
	res := h.doAt(srv.URL, "POST", "/api/v1/emails/batch", sendKey, batch, nil)
	if took := time.Since(began); res.Status != 202 || took > 4*startTimeout {
		t.Fatalf("batch answered %d after %s (%s), want 202 within about %s", res.Status, took, res.Raw, startTimeout)
	}
	if n := whileStarting.Load(); n != 0 {
		t.Fatalf("%d emails answered while the starts ran, want none", n)
	}
	if n := answered(); n != len(batch) {
		t.Fatalf("%d emails answered after the answer, want %d", n, len(batch))
	}
	// Started: nothing to mark.
	h.doAt(h.srv.URL, "POST", "/api/v1/emails/batch", sendKey, batch[:3], nil).data(t, 202)
	if n := answered(); n != len(batch) {
		t.Fatalf("%d emails answered after a batch that started, want %d", n, len(batch))
	}
}

// A retry with the Idempotency-Key that arrives while the first request
// still waits for its start waits too, though the answer committed with
// the email: the first request may yet remove the email (its start fails)
// and answer 503. Before, the retry replayed the stored 202, and its client
// held the id of an email that was never sent and then answered 404.
func TestRetryWaitsForAnAnswerItsRequestMayUndo(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	domainID := h.domainInStatus(h.orgID, "undo.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	slowRefusal := h.serverThrough(beforeStarts(func(ctx context.Context) error {
		time.Sleep(2 * time.Second)
		return refuseStart(ctx)
	}), 0)
	body := map[string]any{"from": "news@undo.example", "to": []string{"a@example.org"}, "subject": "hi", "text": "hello"}
	header := map[string]string{"Idempotency-Key": "undo-1"}

	first := make(chan response, 1)
	go func() { first <- h.doAt(slowRefusal.URL, "POST", "/api/v1/emails", sendKey, body, header) }()
	testenv.Eventually(t, 5*time.Second, "the first request's email stored", func() bool {
		n, err := h.store.DB.NewSelect().Model((*store.Email)(nil)).Where("organization_id = ?", h.orgID).Count(ctx)
		return err == nil && n == 1
	})
	retry := h.doAt(h.srv.URL, "POST", "/api/v1/emails", sendKey, body, header)
	(<-first).expectError(t, 503, "unavailable")
	if retry.Status != 202 || retry.Header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("the retry: %d replayed=%q %s, want its own 202", retry.Status, retry.Header.Get("Idempotent-Replayed"), retry.Raw)
	}
	id := retry.Body["data"].(map[string]any)["email"].(map[string]any)["id"].(string)
	h.do("GET", "/api/v1/emails/"+id, sendKey, nil).data(t, 200)
}
