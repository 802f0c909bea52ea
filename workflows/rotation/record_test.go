package rotation

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/mailyard/mailyard/internal/testenv"
)

// TestRecordLongDNSWait records, on a dev server, one run whose standby key
// stays invisible for longDNSWaitChecks checks, into
// testdata/dkim-rotation-v1-long-dns-wait.json: the shape of a run from
// before a run ended itself after maxDNSChecksPerRun checks (see
// TestReplayLongDNSWait). It runs only when asked to
// (MAILYARD_RECORD_HISTORIES=1), after a deliberate, versioned change.
func TestRecordLongDNSWait(t *testing.T) {
	var checks atomic.Int32
	recordRun(t, "testdata/dkim-rotation-v1-long-dns-wait.json",
		func(context.Context, int64) (Plan, error) {
			return Plan{Active: true, Enabled: true, NextRotationAt: time.Now().Add(-time.Hour)}, nil
		},
		func(context.Context, int64) (bool, error) { return checks.Add(1) > longDNSWaitChecks, nil })
}

// TestRecordIntervalUp records a run whose rotation interval runs out on
// its timer: the plan is loaded again (reload-before-rotating), and the
// rotation made, into testdata/dkim-rotation-v2-interval-up.json.
func TestRecordIntervalUp(t *testing.T) {
	var loads atomic.Int32
	due := time.Now().Add(2 * time.Second)
	recordRun(t, "testdata/dkim-rotation-v2-interval-up.json",
		func(context.Context, int64) (Plan, error) {
			loads.Add(1)
			return Plan{Active: true, Enabled: true, NextRotationAt: due}, nil
		},
		func(context.Context, int64) (bool, error) { return true, nil })
	if loads.Load() != 2 {
		t.Fatalf("the plan was loaded %d times, want 2", loads.Load())
	}
}

// recordRun runs one cycle on a dev server with loadPlan and confirm for
// those steps (the others answer as a rotation goes), and writes the first
// run's history, which ends by continuing as new, to path. It runs only
// when asked to (MAILYARD_RECORD_HISTORIES=1).
func recordRun(t *testing.T, path string, loadPlan func(context.Context, int64) (Plan, error), confirm func(context.Context, int64) (bool, error)) {
	t.Helper()
	if os.Getenv("MAILYARD_RECORD_HISTORIES") != "1" {
		t.Skip("set MAILYARD_RECORD_HISTORIES=1 to record replay histories")
	}
	tc, err := client.Dial(client.Options{HostPort: testenv.OwnTemporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	queue := "rotation-record-" + uuid.NewString()
	w := worker.New(tc, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	for name, fn := range map[string]any{
		LoadPlanActivity:       loadPlan,
		BeginActivity:          func(context.Context, int64) (Status, error) { return begun, nil },
		ConfirmStandbyActivity: confirm,
		SwitchActivity:         func(context.Context, int64) (Status, error) { return switched, nil },
		ReplaceActivity:        func(context.Context, int64) error { return nil },
	} {
		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	ctx := context.Background()
	in := Input{DomainID: domainID, Retain: 10 * time.Millisecond, RecheckEvery: 10 * time.Millisecond}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: WorkflowID(domainID), TaskQueue: queue}, WorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	// The first run ends by continuing as new; keep its history and stop the next.
	if err := run.GetWithOptions(ctx, nil, client.WorkflowRunGetOptions{DisableFollowingRuns: true}); !isContinueAsNew(err) {
		t.Fatalf("first run ended with %v, want continue-as-new", err)
	}
	_ = tc.TerminateWorkflow(ctx, WorkflowID(domainID), "", "recorded")
	history := &historypb.History{}
	it := tc.GetWorkflowHistory(ctx, WorkflowID(domainID), run.GetRunID(), false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		history.Events = append(history.Events, e)
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(history)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d events", len(history.Events))
}

// longDNSWaitChecks is how many times the recorded run finds the standby key
// invisible.
const longDNSWaitChecks = 5

func isContinueAsNew(err error) bool {
	var can *workflow.ContinueAsNewError
	return errors.As(err, &can)
}
