package onboarding

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/temporaldev"
	"github.com/mailyard/mailyard/internal/testenv"
)

// A client that verifies often does not run a run out of updates: on a
// Temporal that takes 20 updates a run (and suggests continuing as new at
// 18), 45 verifies while the run waits an hour for its next check all
// succeed, and the run they began on has continued as new.
func TestManyVerifiesContinueAsNew(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal dev server of its own")
	}
	t.Parallel()
	srv, err := temporaldev.Start(context.Background(), temporaldev.Options{Headless: true,
		DynamicConfig: []string{`history.maxTotalUpdates=20`}})
	if err != nil {
		t.Fatalf("Temporal dev server: %v", err)
	}
	t.Cleanup(srv.Stop)
	tc, err := client.Dial(client.Options{HostPort: srv.Address})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	w := worker.New(tc, TaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(func(context.Context, int64) (CheckResult, error) {
		return CheckResult{Status: StatusPending, Verified: 1, Total: 4}, nil
	}, activity.RegisterOptions{Name: CheckRecordsActivity})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := Input{DomainID: 42, KeysPublished: true, Schedule: []Step{{Every: time.Hour, Until: 72 * time.Hour}}}
	var first string
	for i := range 45 {
		h, err := VerifyNow(ctx, tc, 7, in)
		if err != nil {
			t.Fatalf("verify %d: %v", i+1, err)
		}
		var res VerifyResult
		if err := h.Get(ctx, &res); err != nil || res.Status != StatusPending {
			t.Fatalf("verify %d: %+v, %v", i+1, res, err)
		}
		if first == "" {
			first = h.RunID()
		}
	}
	desc, err := tc.DescribeWorkflowExecution(ctx, WorkflowID(42), first)
	if err != nil {
		t.Fatal(err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		t.Fatalf("the first run is %s, want continued as new", st)
	}
	// Its history, of a run that stopped waiting to continue, is one the
	// replay tests keep (recorded with MAILYARD_RECORD_HISTORIES=1).
	run := tc.GetWorkflow(ctx, WorkflowID(42), first)
	if os.Getenv("MAILYARD_RECORD_HISTORIES") == "1" {
		testenv.WriteHistory(t, tc, run, "testdata/onboarding-v3-continued-by-verifies.json")
	}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	h, err := client.HistoryFromJSON(bytes.NewReader(testenv.HistoryJSON(t, tc, run)), client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ReplayWorkflowHistory(nil, h); err != nil {
		t.Fatalf("the continued run's history does not replay: %v", err)
	}
}
