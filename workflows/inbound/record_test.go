package inbound_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/inbound"
)

// TestRecordLocalStepFailedHistory records, on the dev server, the run of a
// message whose handling fails its local tries and goes on as a regular
// activity (local-step-fallback), for the replay tests. The handling is a
// stand-in that fails when run locally, as it would with the database
// down: the history's shape is the workflow's, whatever the handling
// found. The other histories come from internal/e2e's inbound tests. It
// runs only when asked to (MAILYARD_RECORD_HISTORIES=1).
func TestRecordLocalStepFailedHistory(t *testing.T) {
	if os.Getenv("MAILYARD_RECORD_HISTORIES") != "1" {
		t.Skip("set MAILYARD_RECORD_HISTORIES=1 to record replay histories")
	}
	tc, err := client.Dial(client.Options{HostPort: testenv.OwnTemporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	w := sdkworker.New(tc, inbound.TaskQueue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(inbound.Workflow, workflow.RegisterOptions{Name: inbound.WorkflowName})
	w.RegisterActivityWithOptions(func(ctx context.Context, in inbound.HandleInput) (inbound.HandleResult, error) {
		if activity.GetInfo(ctx).IsLocalActivity {
			return inbound.HandleResult{}, errors.New("the database is down")
		}
		return inbound.HandleResult{Kind: "dsn", Effects: 1, OrganizationID: 1, DomainID: 1}, nil
	}, activity.RegisterOptions{Name: inbound.HandleActivity})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const id = "0193a5c4-2f00-7000-8000-0000000000a1"
	if err := inbound.Start(context.Background(), tc, id, searchattr.Owner{}, 0); err != nil {
		t.Fatal(err)
	}
	run := tc.GetWorkflow(context.Background(), inbound.WorkflowID(id), "")
	var res inbound.Result
	if err := run.Get(context.Background(), &res); err != nil || res.Effects != 1 {
		t.Fatalf("result %+v, %v", res, err)
	}
	testenv.WriteHistory(t, tc, run, "testdata/inbound-message-v3-local-step-failed.json")
}
