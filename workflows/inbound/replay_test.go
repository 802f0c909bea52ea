package inbound_test

import (
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/inbound"
)

// Histories of real runs (internal/e2e's TestInboundReportsEndToEnd with
// MAILYARD_RECORD_HISTORIES=1) must replay with the current code: a change
// that would break messages on their way fails here and needs
// workflow.GetVersion. v1: runs that waited out the retention time and
// erased the message; v2: the current code, which ends once the message is
// handled (v2-local-step-failed, from TestRecordLocalStepFailedHistory:
// handling failed its local tries and went on as a regular activity).
func TestReplayRecordedHistories(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		testenv.ReplayHistories(t, "testdata/inbound-message-"+v+"-*.json", 3, inbound.Workflow, inbound.WorkflowName)
	}
}

// An unversioned change (a pause before handling) fails replay: the replay
// test can fail.
func TestUnversionedChangeFailsReplay(t *testing.T) {
	changed := func(ctx workflow.Context, in inbound.Input) (inbound.Result, error) {
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return inbound.Result{}, err
		}
		return inbound.Workflow(ctx, in)
	}
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: inbound.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/inbound-message-v1-dsn-1-effects.json"); err == nil {
		t.Fatal("an unversioned change replayed without error")
	}
}
