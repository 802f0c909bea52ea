package recovery_test

import (
	"path/filepath"
	"testing"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/workflows/recovery"
)

// Histories of real runs (TestRecordHistories) must replay with the current
// code: a change that would break running recoveries fails here and needs
// workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/webhook-recovery-v1-*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("recorded histories: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(recovery.Workflow, workflow.RegisterOptions{Name: recovery.WorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay: %v", err)
			}
		})
	}
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
