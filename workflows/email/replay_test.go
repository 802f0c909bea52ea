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
	// them); v3: the current code.
	for _, v := range []string{"v1", "v2", "v3"} {
		testenv.ReplayHistories(t, "testdata/email-delivery-"+v+"-*.json", 5, email.Workflow, email.WorkflowName)
	}
}

// Marker names in a history (protojson varies the spaces).
var (
	versionMarker       = regexp.MustCompile(`"markerName":\s*"Version"`)
	localActivityMarker = regexp.MustCompile(`"markerName":\s*"LocalActivity"`)
)

// Each history holds the version its name claims, so every code path is
// replayed: v1 files have no marker, v2 files version markers only, v3
// files also the local activity's marker of the first attempt (or of the
// prepare step alone).
func TestHistoriesHoldTheirVersion(t *testing.T) {
	files, _ := filepath.Glob("testdata/email-delivery-v*.json")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		versioned := versionMarker.Match(raw)
		local := localActivityMarker.Match(raw)
		want := map[string][2]bool{"v1": {false, false}, "v2": {true, false}, "v3": {true, true}}[strings.Split(filepath.Base(f), "-")[2]]
		if strings.HasSuffix(f, "-canceled.json") {
			want[1] = false // canceled before its first attempt
		}
		if [2]bool{versioned, local} != want {
			t.Errorf("%s: version marker %v, local activity marker %v, want %v", f, versioned, local, want)
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
