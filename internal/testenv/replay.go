package testenv

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// ReplayHistories replays every history matching pattern (recorded from real
// runs into a workflow package's testdata/) against the current workflow code,
// registered under name; at least min must exist. A change that would break
// running workflows fails here and needs workflow.GetVersion.
func ReplayHistories(t *testing.T, pattern string, min int, wf any, name string) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) < min {
		t.Fatalf("recorded histories %s: %v %v (want at least %d)", pattern, files, err, min)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay: %v", err)
			}
		})
	}
}
