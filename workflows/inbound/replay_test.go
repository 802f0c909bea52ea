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
// that would break messages waiting out their retention fails here and needs
// workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/inbound-message-v1-*.json", 3, inbound.Workflow, inbound.WorkflowName)
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
