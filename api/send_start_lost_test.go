package api_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

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
	lossy, err := client.Dial(client.Options{HostPort: testenv.Temporal(t),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(lose)}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lossy.Close)
	srv := httpServer(t, api.New(api.Deps{Config: h.cfg, Store: h.store, Temporal: lossy, Logger: h.logger}).Handler())
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
