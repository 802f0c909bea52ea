package rotation

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/testenv"
)

// A run from before runs continued as new, already past a multiple of
// maxDNSChecksPerRun when a new worker takes it over, continues as new at the
// next multiple: the new worker replays the first one with DefaultVersion,
// as the old code ran it, and reaches the next one itself. On a dev server;
// a limit too high to be reached stands for the old code (it reads no
// version, as the old code did not).
func TestTakeOverOfALongDNSWait(t *testing.T) {
	defer maxDNSChecksPerRun.Store(maxDNSChecksPerRun.Load())
	maxDNSChecksPerRun.Store(1 << 30)
	tc, err := client.Dial(client.Options{HostPort: testenv.OwnTemporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	queue := "rotation-takeover-" + uuid.NewString()
	var checks atomic.Int32
	reached := make(chan struct{})
	newWorker := func() worker.Worker {
		w := worker.New(tc, queue, worker.Options{})
		w.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
		for name, fn := range map[string]any{
			LoadPlanActivity: func(context.Context, int64) (Plan, error) {
				return Plan{Active: true, Enabled: true, NextRotationAt: time.Now().Add(-time.Hour)}, nil
			},
			BeginActivity: func(context.Context, int64) (Status, error) { return begun, nil },
			ConfirmStandbyActivity: func(context.Context, int64) (bool, error) {
				if checks.Add(1) == 4 {
					close(reached)
				}
				return false, nil
			},
			SwitchActivity:  func(context.Context, int64) (Status, error) { return switched, nil },
			ReplaceActivity: func(context.Context, int64) error { return nil },
		} {
			w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		return w
	}

	old := newWorker()
	ctx := context.Background()
	in := Input{DomainID: domainID, Retain: time.Millisecond, RecheckEvery: 20 * time.Millisecond}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: WorkflowID(domainID), TaskQueue: queue, WorkflowTaskTimeout: time.Second}, WorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not reach 4 DNS checks")
	}
	old.Stop()
	// The new worker replays the history from the start.
	worker.PurgeStickyWorkflowCache()
	maxDNSChecksPerRun.Store(3)
	defer newWorker().Stop()

	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := run.GetWithOptions(waitCtx, nil, client.WorkflowRunGetOptions{DisableFollowingRuns: true}); !isContinueAsNew(err) {
		t.Fatalf("the run taken over ended with %v after %d checks, want continue-as-new", err, checks.Load())
	}
	_ = tc.TerminateWorkflow(ctx, WorkflowID(domainID), "", "test over")
}
