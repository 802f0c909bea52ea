package onboarding

import (
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/testenv"
)

// Histories of real runs (recorded by the end-to-end test with
// MAILYARD_RECORD_HISTORIES=1) must replay with the current code: a change that
// would break running workflows fails here, and needs workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/onboarding-*.json", 3, Workflow, WorkflowName)
}

// An unversioned change — here, checking the records before generating keys —
// is caught by replay: this proves the replay tests can fail.
func TestUnversionedChangeFailsReplay(t *testing.T) {
	changed := func(ctx workflow.Context, in Input) (Result, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		var res CheckResult
		if err := workflow.ExecuteActivity(ctx, CheckRecordsActivity, in.DomainID).Get(ctx, &res); err != nil {
			return Result{}, err
		}
		return Workflow(ctx, in)
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/onboarding-v1-verified-by-update.json"); err == nil {
		t.Fatal("a reordered workflow replayed without error")
	}
}
