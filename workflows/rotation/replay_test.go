package rotation

import (
	"testing"

	"github.com/mailyard/mailyard/internal/testenv"
)

// Histories of real runs (recorded by the end-to-end test and by
// record_test.go with MAILYARD_RECORD_HISTORIES=1) must replay with the
// current code: v1 from before reload-before-rotating, v2 a run whose
// interval ran out on its timer, with the plan loaded again.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/*.json", 1, Workflow, WorkflowName)
}

// A run recorded before runs ended after maxDNSChecksPerRun checks replays
// with the limit below its number of checks: the change is versioned.
func TestReplayLongDNSWait(t *testing.T) {
	defer maxDNSChecksPerRun.Store(maxDNSChecksPerRun.Load())
	maxDNSChecksPerRun.Store(longDNSWaitChecks - 2)
	testenv.ReplayHistories(t, "testdata/dkim-rotation-v1-long-dns-wait.json", 1, Workflow, WorkflowName)
}
