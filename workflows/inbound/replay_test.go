package inbound_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
// erased the message; v2: runs that end once the message is handled, with
// the close-when-handled version marker; v3: the current code, the same
// with the version in the input instead of the marker (*-local-step-failed,
// from TestRecordLocalStepFailedHistory: handling failed its local tries
// and went on as a regular activity).
func TestReplayRecordedHistories(t *testing.T) {
	for _, v := range []string{"v1", "v2", "v3"} {
		testenv.ReplayHistories(t, "testdata/inbound-message-"+v+"-*.json", 3, inbound.Workflow, inbound.WorkflowName)
	}
}

// Each history holds the version its name claims: v1 and v3 files no
// version marker, v2 files the one of close-when-handled; the files of
// handling that failed its local tries also the one of local-step-fallback.
func TestHistoriesHoldTheirVersion(t *testing.T) {
	versionMarker := regexp.MustCompile(`"markerName":\s*"Version"`)
	wants := map[string]int{"v1": 0, "v2": 1, "v3": 0}
	files, _ := filepath.Glob("testdata/inbound-message-v*.json")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want := wants[strings.Split(filepath.Base(f), "-")[2]]
		if strings.HasSuffix(f, "-local-step-failed.json") {
			want++
		}
		if got := len(versionMarker.FindAll(raw, -1)); got != want {
			t.Errorf("%s: %d version markers, want %d", f, got, want)
		}
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

// During a rolling deploy a new listener writes the version into the input
// of a run that a worker of before makes, and records the version marker; a
// new worker then replays that run with the version from the input and no
// GetVersion. The SDK does not hold the marker against it: the run goes on.
func TestRunsWithBothTheVersionAndTheMarkerReplay(t *testing.T) {
	testenv.ReplayHistoriesWithInput(t, "testdata/inbound-message-v2-*.json", 3, inbound.Workflow, inbound.WorkflowName,
		func(in *inbound.Input) { in.Version = inbound.CurrentVersion })
}
