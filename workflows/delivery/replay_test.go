package delivery_test

import (
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// Histories of real runs (TestRecordHistories) must replay with the current
// code: a change that would break running deliveries fails here and needs
// workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/webhook-delivery-v1-*.json", 5, delivery.Workflow, delivery.WorkflowName)
}

// pauseFirst is a change to the workflow: a short pause before the first
// attempt.
func pauseFirst(ctx workflow.Context, in delivery.Input) (delivery.Result, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return delivery.Result{}, err
	}
	return delivery.Workflow(ctx, in)
}

// An unversioned change is caught by replay: this proves the replay tests
// can fail.
func TestUnversionedChangeFailsReplay(t *testing.T) {
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(pauseFirst, workflow.RegisterOptions{Name: delivery.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/webhook-delivery-v1-retried-then-delivered.json"); err == nil {
		t.Fatal("an unversioned change replayed without error")
	}
}

// The same change behind workflow.GetVersion replays: old runs keep the old
// path, new runs take the new one.
func TestVersionedChangeReplays(t *testing.T) {
	versioned := func(ctx workflow.Context, in delivery.Input) (delivery.Result, error) {
		if workflow.GetVersion(ctx, "pause-before-first-attempt", workflow.DefaultVersion, 1) == 1 {
			return pauseFirst(ctx, in)
		}
		return delivery.Workflow(ctx, in)
	}
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(versioned, workflow.RegisterOptions{Name: delivery.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/webhook-delivery-v1-retried-then-delivered.json"); err != nil {
		t.Fatalf("versioned change: %v", err)
	}
}
