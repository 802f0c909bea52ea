package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/onboarding"
	"github.com/mailyard/mailyard/workflows/rotation"
)

// A rotation the workflow accepted but has not begun within the budget is
// answered 202 from the database, and a verification the workflow has not
// finished is answered with the domain as stored: both go on in their
// workflows. Before, the SDK's deadline error (a gRPC status, not
// context.DeadlineExceeded) was not recognized, and both answered 503.
func TestSlowLifecycleWorkflowsAreAnsweredFromTheStore(t *testing.T) {
	h := newHarness(t)
	// A Temporal of its own: on the package's shared server this worker
	// took other tests' domain workflows, and their workers this test's
	// runs, whose updates then were not accepted in time.
	tc, base := h.onOwnTemporal()
	// Long enough for the new worker's first workflow task on a loaded
	// machine: the fallback is only for an update the run accepted.
	api.ShortenLifecycleBudgets(t, 6*time.Second)
	// Workflows that accept their updates and never finish them.
	never := func(ctx workflow.Context) error { return workflow.Await(ctx, func() bool { return false }) }
	w := sdkworker.New(tc, rotation.TaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ rotation.Input) error {
		if err := workflow.SetUpdateHandler(ctx, rotation.RotateUpdate, func(ctx workflow.Context) (rotation.Status, error) {
			return rotation.Status{}, never(ctx)
		}); err != nil {
			return err
		}
		return never(ctx)
	}, workflow.RegisterOptions{Name: rotation.WorkflowName})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ onboarding.Input) error {
		if err := workflow.SetUpdateHandler(ctx, onboarding.VerifyUpdate, func(ctx workflow.Context) (onboarding.VerifyResult, error) {
			return onboarding.VerifyResult{}, never(ctx)
		}); err != nil {
			return err
		}
		return never(ctx)
	}, workflow.RegisterOptions{Name: onboarding.WorkflowName})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	verified := h.domainInStatus(h.orgID, "slow.example", store.DomainVerified)
	for i, state := range []string{store.DKIMActive, store.DKIMStandby} {
		if _, err := h.store.InsertDKIMKeyIfAbsent(context.Background(), &store.DKIMKey{Selector: fmt.Sprintf("sel%d", i+1), DomainID: verified,
			Position: i + 1, Generation: 1, State: state, Bits: 2048, PrivateKeyEnc: []byte("sealed"), PublicKey: "pub"}); err != nil {
			t.Fatal(err)
		}
	}
	rot := h.doAt(base, "POST", fmt.Sprintf("/api/v1/domains/%d/dkim/rotate", verified), h.adminKey, nil, nil).data(t, 202)["rotation"].(map[string]any)
	if rot["status"] != rotation.StatusWaitingForDNS || rot["active_selector"] != "sel1" || rot["next_selector"] != "sel2" {
		t.Errorf("rotation %v, want status %s", rot, rotation.StatusWaitingForDNS)
	}
	pending := h.domainInStatus(h.orgID, "pending.example", store.DomainPending)
	dom := h.doAt(base, "POST", fmt.Sprintf("/api/v1/domains/%d/verify", pending), h.adminKey, nil, nil).data(t, 200)["domain"].(map[string]any)
	if dom["status"] != store.DomainPending {
		t.Errorf("domain %v, want it pending as stored", dom)
	}
}

// A verification the workflow never accepted (Temporal unreachable: here a
// server that takes connections and never answers) is 503, not the stored
// state, as if it went on: nothing may be checking the domain. Before, the
// budget running out answered 200.
func TestVerifyWithoutTemporalIsUnavailable(t *testing.T) {
	h := newHarness(t)
	api.ShortenLifecycleBudgets(t, 2*time.Second)
	silent, _ := testenv.SilentServer(t, "127.0.0.1:0", false)
	down := httpServer(t, h.apiWithTemporalAt(silent).Handler())
	pending := h.domainInStatus(h.orgID, "pending.example", store.DomainPending)
	h.doAt(down.URL, "POST", fmt.Sprintf("/api/v1/domains/%d/verify", pending), h.adminKey, nil, nil).expectError(t, 503, "unavailable")
}
