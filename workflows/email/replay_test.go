package email_test

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
	"github.com/mailyard/mailyard/workflows/email"
)

// Histories of real runs (TestRecordHistories) must replay with the current
// code: a change that would break emails on their way fails here and needs
// workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	// v1: emails queued before scheduled sending; v2: before the local
	// first attempt (scheduled, rescheduled and canceled emails among
	// them); v3: before one version marker; v4: before runs ended when
	// settled (version 1 of the one marker); v5: before the version moved
	// into the input; v6: the current code.
	for _, v := range []string{"v1", "v2", "v3", "v4", "v5", "v6"} {
		testenv.ReplayHistories(t, "testdata/email-delivery-"+v+"-*.json", 5, email.Workflow, email.WorkflowName)
	}
	// A reschedule still recording itself when the time came: before the
	// updates-before-send change the run sent at once (and ended with the
	// step in flight); after it, it waits for the step, behind a marker.
	testenv.ReplayHistories(t, "testdata/email-delivery-inflight-*.json", 2, email.Workflow, email.WorkflowName)
	// Changes that only some runs meet, each recorded on the code before
	// and after it (TestRecordHistories with MAILYARD_RECORD_RARE): two
	// reschedules whose steps commit in the other order, a run canceled
	// through Temporal while the email waits, and one canceled while its
	// recipient waits for the next attempt. The runs after record the
	// change's marker; those before have none.
	testenv.ReplayHistories(t, "testdata/email-delivery-rare-*.json", 6, email.Workflow, email.WorkflowName)
	files, _ := filepath.Glob("testdata/email-delivery-rare-*.json")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if strings.Contains(f, "-rare-after-") {
			want = 1
		}
		if got := len(versionMarker.FindAll(raw, -1)); got != want {
			t.Errorf("%s: %d version markers, want %d", f, got, want)
		}
	}
}

// Marker names in a history (protojson varies the spaces).
var (
	versionMarker       = regexp.MustCompile(`"markerName":\s*"Version"`)
	localActivityMarker = regexp.MustCompile(`"markerName":\s*"LocalActivity"`)
	eraseStep           = regexp.MustCompile(`"name":\s*"` + email.EraseActivity + `"`)
)

// Each history holds the version its name claims, so every code path is
// replayed: v1 files have no marker; v2 files the version marker of
// scheduled sending; v3 files also the one of the local first attempt and
// the local activity's marker of that attempt (or of the prepare step
// alone); v4 files one version marker for both changes; v5 files the same
// marker (at version 2) and no erase step: the run ended when the email
// was settled; v6 files no marker at all (the version is in the input).
// The file of a local step that failed its tries also has the marker of
// local-step-fallback.
func TestHistoriesHoldTheirVersion(t *testing.T) {
	files, _ := filepath.Glob("testdata/email-delivery-v*.json")
	type shape struct {
		versionMarkers int
		local          bool
		erases         bool
	}
	wants := map[string]shape{"v1": {0, false, true}, "v2": {1, false, true}, "v3": {2, true, true}, "v4": {1, true, true}, "v5": {1, true, false}, "v6": {0, true, false}}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got := shape{len(versionMarker.FindAll(raw, -1)), localActivityMarker.Match(raw), eraseStep.Match(raw)}
		version := strings.Split(filepath.Base(f), "-")[2]
		want := wants[version]
		if strings.HasSuffix(f, "-canceled.json") || strings.HasSuffix(f, "-gone.json") {
			// Ended before anything was sent: nothing to erase.
			want.erases = false
		}
		if strings.HasSuffix(f, "-local-step-failed.json") {
			// The local-step-fallback marker too.
			want.versionMarkers++
		}
		if strings.HasSuffix(f, "-canceled.json") {
			// Canceled before its first attempt: no local activity,
			// and in v3 no marker of the change it never reached.
			want.local = false
			if version == "v3" {
				want.versionMarkers = 1
			}
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", f, got, want)
		}
	}
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

// During a rolling deploy a new API writes the version into the input of a
// run that a worker of before makes, and records the version marker; a new
// worker then replays that run with the version from the input and no
// GetVersion. The SDK does not hold the marker against it: the run goes on.
// Here the v5 histories, with the version written into their input.
func TestRunsWithBothTheVersionAndTheMarkerReplay(t *testing.T) {
	testenv.ReplayHistoriesWithInput(t, "testdata/email-delivery-v5-*.json", 5, email.Workflow, email.WorkflowName,
		func(in *email.Input) { in.Version = email.CurrentVersion })
}
