package recovery_test

import (
	"testing"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/recovery"
)

// Histories of real runs (TestRecordHistories) must replay with the current
// code: a change that would break running recoveries fails here and needs
// workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/webhook-recovery-v1-*.json", 2, recovery.Workflow, recovery.WorkflowName)
}

// An unversioned change (a pause before the first page) is caught by replay.
func TestUnversionedChangeFailsReplay(t *testing.T) {
	changed := func(ctx workflow.Context, in recovery.Input) (recovery.Result, error) {
		if err := workflow.Sleep(ctx, 1); err != nil {
			return recovery.Result{}, err
		}
		return recovery.Workflow(ctx, in)
	}
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: recovery.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/webhook-recovery-v1-three-failed.json"); err == nil {
		t.Fatal("an unversioned change replayed without error")
	}
}
