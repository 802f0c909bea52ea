package deletion

import (
	"testing"

	"github.com/mailyard/mailyard/internal/testenv"
)

// Histories of real runs (recorded by the end-to-end test with
// MAILYARD_RECORD_HISTORIES=1) must replay with the current code.
func TestReplayRecordedHistories(t *testing.T) {
	testenv.ReplayHistories(t, "testdata/*.json", 1, Workflow, WorkflowName)
}
