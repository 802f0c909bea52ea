package testenv

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
)

// ReplayHistories replays every history matching pattern (recorded from real
// runs into a workflow package's testdata/) against the current workflow code,
// registered under name; at least min must exist. A change that would break
// running workflows fails here and needs workflow.GetVersion.
func ReplayHistories(t *testing.T, pattern string, min int, wf any, name string) {
	t.Helper()
	replayEach(t, pattern, min, wf, name, func(*historypb.History) {})
}

// ReplayHistoriesWithInput is ReplayHistories with each history's input
// first changed by edit: a run started by a new starter (which writes
// something new into the input) and made by a worker of before, replayed by
// the current code. In is the workflow's input type.
func ReplayHistoriesWithInput[In any](t *testing.T, pattern string, min int, wf any, name string, edit func(*In)) {
	t.Helper()
	replayEach(t, pattern, min, wf, name, func(h *historypb.History) {
		payload := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0]
		var in In
		if err := json.Unmarshal(payload.Data, &in); err != nil {
			t.Fatal(err)
		}
		edit(&in)
		data, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		payload.Data = data
	})
}

// replayEach replays, in a subtest each, the histories matching pattern,
// each changed by change first.
func replayEach(t *testing.T, pattern string, min int, wf any, name string, change func(*historypb.History)) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) < min {
		t.Fatalf("recorded histories %s: %v %v (want at least %d)", pattern, files, err, min)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var h historypb.History
			if err := protojson.Unmarshal(raw, &h); err != nil {
				t.Fatal(err)
			}
			change(&h)
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
			if err := r.ReplayWorkflowHistory(nil, &h); err != nil {
				t.Fatalf("replay: %v", err)
			}
		})
	}
}

// HistoryJSON reads a run's whole history in the JSON the replayer reads.
func HistoryJSON(t testing.TB, tc client.Client, run client.WorkflowRun) []byte {
	t.Helper()
	var h historypb.History
	it := tc.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	raw, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// WriteHistory records a run's history at path (a workflow package's
// testdata/) for ReplayHistories.
func WriteHistory(t testing.TB, tc client.Client, run client.WorkflowRun, path string) {
	t.Helper()
	raw := HistoryJSON(t, tc, run)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}
