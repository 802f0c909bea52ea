package delivery_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// Histories of real runs (TestRecordHistories) must replay with the current
// code: a change that would break running deliveries fails here and needs
// workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/webhook-delivery-v*-*.json", 10, delivery.Workflow, delivery.WorkflowName)
}

// The histories are of the two versions the workflow runs: v1 made each
// attempt a regular activity, v2 (the "local-attempt" change) a local
// activity, whose result is a marker and which schedules no activity task;
// in v2-local-attempt-failed each attempt fails its local tries and goes on
// as a regular activity (the "local-step-fallback" change).
func TestRecordedHistoriesHoldBothVersions(t *testing.T) {
	for version, wantLocal := range map[string]bool{"v1": false, "v2": true} {
		files, _ := filepath.Glob("testdata/webhook-delivery-" + version + "-*.json")
		if len(files) < 5 {
			t.Fatalf("%s: %d histories", version, len(files))
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var h struct {
				Events []struct {
					EventType string `json:"eventType"`
				} `json:"events"`
			}
			if err := json.Unmarshal(raw, &h); err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, e := range h.Events {
				count[e.EventType]++
			}
			scheduled, markers := count["EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"], count["EVENT_TYPE_MARKER_RECORDED"]
			if strings.HasSuffix(f, "-local-attempt-failed.json") {
				// Two attempts, each a marker of its failed local tries
				// and a regular activity; markers of both versions.
				if scheduled != 2 || markers != 4 {
					t.Errorf("%s: %d activity tasks, %d markers, want 2 and 4", f, scheduled, markers)
				}
				continue
			}
			if local := markers > 0 && scheduled == 0; local != wantLocal || scheduled+markers == 0 {
				t.Errorf("%s: %d activity tasks, %d markers", f, scheduled, markers)
			}
		}
	}
}

// pauseFirst is a change to the workflow: a short pause before the first
// attempt.
func pauseFirst(ctx workflow.Context, in delivery.Input) (delivery.Result, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return delivery.Result{}, err
	}
	return delivery.Workflow(ctx, in)
}

// An unversioned change is caught by replay: this proves the replay tests
// can fail.
func TestUnversionedChangeFailsReplay(t *testing.T) {
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(pauseFirst, workflow.RegisterOptions{Name: delivery.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/webhook-delivery-v1-retried-then-delivered.json"); err == nil {
		t.Fatal("an unversioned change replayed without error")
	}
}

// The same change behind workflow.GetVersion replays: old runs keep the old
// path, new runs take the new one.
func TestVersionedChangeReplays(t *testing.T) {
	versioned := func(ctx workflow.Context, in delivery.Input) (delivery.Result, error) {
		if workflow.GetVersion(ctx, "pause-before-first-attempt", workflow.DefaultVersion, 1) == 1 {
			return pauseFirst(ctx, in)
		}
		return delivery.Workflow(ctx, in)
	}
	r := sdkworker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(versioned, workflow.RegisterOptions{Name: delivery.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/webhook-delivery-v1-retried-then-delivered.json"); err != nil {
		t.Fatalf("versioned change: %v", err)
	}
}
