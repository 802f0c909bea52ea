package email_test

import (
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/email"
)

// Histories of real runs (TestRecordHistories) must replay with the current
// code: a change that would break emails on their way fails here and needs
// workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/email-delivery-v1-*.json", 5, email.Workflow, email.WorkflowName)
}

// pauseFirst is a change to the workflow: a short pause before it
// prepares the email.
func pauseFirst(ctx workflow.Context, in email.Input) (email.Result, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return email.Result{}, err
	}
	return email.Workflow(ctx, in)
}

// skipPrepare is another change: the first attempt without the prepare step.
func skipPrepare(ctx workflow.Context, in email.Input) (email.Result, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var r email.AttemptResult
	err := workflow.ExecuteActivity(ctx, email.AttemptActivity, email.AttemptInput{EmailID: in.EmailID, Attempt: 1}).Get(ctx, &r)
	return email.Result{Status: email.StatusSent, Attempts: 1}, err
}

// Unversioned changes are caught by replay: this proves the replay tests
// can fail.
func TestUnversionedChangeFailsReplay(t *testing.T) {
	for name, wf := range map[string]func(workflow.Context, email.Input) (email.Result, error){
		"pause first": pauseFirst, "skip prepare": skipPrepare,
	} {
		r := sdkworker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: email.WorkflowName})
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/email-delivery-v1-deferred-then-delivered.json"); err == nil {
			t.Fatalf("%s: an unversioned change replayed without error", name)
		}
	}
}

// The same change behind workflow.GetVersion replays: emails on their way
// keep the old path, new ones take the new one.
func TestVersionedChangeReplays(t *testing.T) {
	versioned := func(ctx workflow.Context, in email.Input) (email.Result, error) {
		if workflow.GetVersion(ctx, "pause-before-prepare", workflow.DefaultVersion, 1) == 1 {
			return pauseFirst(ctx, in)
		}
		return email.Workflow(ctx, in)
	}
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(versioned, workflow.RegisterOptions{Name: email.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/email-delivery-v1-deferred-then-delivered.json"); err != nil {
		t.Fatalf("versioned change: %v", err)
	}
}
