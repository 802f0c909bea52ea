package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

func stubList(context.Context, ListInput) (ListResult, error) {
	return ListResult{}, errors.New("not mocked")
}
func stubRedeliver(context.Context, RedeliverInput) (RedeliverResult, error) {
	return RedeliverResult{}, errors.New("not mocked")
}

// failedStore is the window's failed deliveries as ListFailed pages them.
type failedStore struct {
	ids         []string
	redelivered []string
	skip        map[string]bool // not failed any more by the time they are reached
	goneAt      string          // the webhook is disabled when this one is reached
	lists       []ListInput
}

func newEnv(t *testing.T, fs *failedStore) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	env.RegisterActivityWithOptions(stubList, activity.RegisterOptions{Name: ListFailedActivity})
	env.RegisterActivityWithOptions(stubRedeliver, activity.RegisterOptions{Name: RedeliverActivity})
	env.OnActivity(ListFailedActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ListInput) (ListResult, error) {
		fs.lists = append(fs.lists, in)
		var page []string
		for _, id := range fs.ids {
			if id > in.After && len(page) < in.Limit {
				page = append(page, id)
			}
		}
		return ListResult{DeliveryIDs: page}, nil
	})
	env.OnActivity(RedeliverActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in RedeliverInput) (RedeliverResult, error) {
		if in.RecoveryID != "rec-1" {
			return RedeliverResult{}, fmt.Errorf("recovery id %q", in.RecoveryID)
		}
		if in.DeliveryID == fs.goneAt {
			return RedeliverResult{WebhookGone: true}, nil
		}
		if fs.skip[in.DeliveryID] {
			return RedeliverResult{}, nil
		}
		fs.redelivered = append(fs.redelivered, in.DeliveryID)
		return RedeliverResult{Redelivered: true}, nil
	})
	return env
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("0193a5c4-2f00-7000-8000-%012d", i+1)
	}
	return out
}

var window = Input{WebhookID: 7, RecoveryID: "rec-1",
	Since: time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)}

func run(t *testing.T, env *testsuite.TestWorkflowEnvironment) Result {
	t.Helper()
	env.ExecuteWorkflow(WorkflowName, window)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := env.GetWorkflowResult(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Every failed delivery of the window, over several pages, oldest first,
// each once; one that is no longer failed is not counted.
func TestRedeliversEveryPageOldestFirst(t *testing.T) {
	fs := &failedStore{ids: ids(2*PageSize + 5), skip: map[string]bool{}}
	fs.skip[fs.ids[3]] = true
	r := run(t, newEnv(t, fs))
	want := slices.Delete(slices.Clone(fs.ids), 3, 4)
	if !slices.Equal(fs.redelivered, want) {
		t.Fatalf("redelivered %d, want %d in order", len(fs.redelivered), len(want))
	}
	if r.Redelivered != len(want) || r.Stopped {
		t.Fatalf("result %+v", r)
	}
	if len(fs.lists) != 3 || fs.lists[0].After != "" || fs.lists[1].After != fs.ids[PageSize-1] ||
		fs.lists[0].WebhookID != 7 || !fs.lists[0].Since.Equal(window.Since) || !fs.lists[0].Until.Equal(window.Until) {
		t.Fatalf("pages asked: %+v", fs.lists)
	}
}

func TestStopsWhenTheWebhookIsDisabled(t *testing.T) {
	fs := &failedStore{ids: ids(10), goneAt: ids(10)[4]}
	r := run(t, newEnv(t, fs))
	if r.Redelivered != 4 || !r.Stopped || len(fs.redelivered) != 4 {
		t.Fatalf("result %+v, redelivered %v", r, fs.redelivered)
	}
}

func TestEmptyWindow(t *testing.T) {
	fs := &failedStore{}
	if r := run(t, newEnv(t, fs)); r.Redelivered != 0 || len(fs.lists) != 1 {
		t.Fatalf("result %+v, %d lists", r, len(fs.lists))
	}
}
