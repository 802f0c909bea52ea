package delivery_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
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
	// A change only some runs meet, recorded on the code before and after
	// it (TestRecordHistories with MAILYARD_RECORD_RARE): a signing secret
	// that cannot be decrypted. Before, the local attempt's non-retryable
	// error went on to the regular activity (its local-step-fallback
	// marker), which found the delivery failed and the run completed; after,
	// the run fails at once (its non-retryable-ends-local-step marker).
	testenv.ReplayHistories(t, "testdata/webhook-delivery-rare-*.json", 2, delivery.Workflow, delivery.WorkflowName)
	for file, ending := range map[string]string{"before": "COMPLETED", "after": "FAILED"} {
		raw, err := os.ReadFile("testdata/webhook-delivery-rare-" + file + "-secret-unreadable.json")
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`"EVENT_TYPE_WORKFLOW_EXECUTION_` + ending + `"`).Match(raw) {
			t.Errorf("the run %s the change did not end %s", file, ending)
		}
	}
}

// versionMarker finds a version marker in a history (protojson varies the
// spaces).
var versionMarker = regexp.MustCompile(`"markerName":\s*"Version"`)

// The histories are of the versions the workflow runs: v1 made each attempt
// a regular activity, v2 (the "local-attempt" change, one version marker) a
// local activity, whose result is a marker and which schedules no activity
// task, and v3 the same with the version in the input instead of its
// marker. In the local-attempt-failed files each attempt fails its local
// tries and goes on as a regular activity (the "local-step-fallback"
// change, one more version marker).
func TestRecordedHistoriesHoldTheirVersion(t *testing.T) {
	type shape struct {
		local          bool
		versionMarkers int
	}
	for version, want := range map[string]shape{"v1": {false, 0}, "v2": {true, 1}, "v3": {true, 0}} {
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
			versionMarkers := len(versionMarker.FindAll(raw, -1))
			if strings.HasSuffix(f, "-local-attempt-failed.json") {
				// Two attempts, each a marker of its failed local tries
				// and a regular activity, and the fallback's marker.
				if scheduled != 2 || markers-versionMarkers != 2 || versionMarkers != want.versionMarkers+1 {
					t.Errorf("%s: %d activity tasks, %d markers (%d of versions)", f, scheduled, markers, versionMarkers)
				}
				continue
			}
			local := markers > versionMarkers && scheduled == 0
			if got := (shape{local, versionMarkers}); got != want || scheduled+markers == 0 {
				t.Errorf("%s: %d activity tasks, %d markers: %+v, want %+v", f, scheduled, markers, got, want)
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

// During a rolling deploy a new API writes the version into the input of a
// run that a worker of before makes, and records the version marker; a new
// worker then replays that run with the version from the input and no
// GetVersion. The SDK does not hold the marker against it: the run goes on.
func TestRunsWithBothTheVersionAndTheMarkerReplay(t *testing.T) {
	testenv.ReplayHistoriesWithInput(t, "testdata/webhook-delivery-v2-*.json", 5, delivery.Workflow, delivery.WorkflowName,
		func(in *delivery.Input) { in.Version = delivery.CurrentVersion })
}
