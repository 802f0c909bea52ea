package inbound

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/searchattr"
)

const testInboundID = "0193a5c4-2f00-7000-8000-00000000in01"

func stubHandle(context.Context, HandleInput) (HandleResult, error) {
	return HandleResult{}, errors.New("not mocked")
}
func stubErase(context.Context, EraseInput) error { return errors.New("not mocked") }

// The message is handled once and the owner's search attributes are set
// from what handling found. The run then ends: the retention sweep erases
// the bytes later. A run that began before close-when-handled erases them
// itself after the retention time (a durable timer, skipped here).
func TestHandledThenEnded(t *testing.T) {
	for name, version := range map[string]workflow.Version{"current": 1, "before close-when-handled": workflow.DefaultVersion} {
		t.Run(name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
			env.RegisterActivityWithOptions(stubHandle, activity.RegisterOptions{Name: HandleActivity})
			env.RegisterActivityWithOptions(stubErase, activity.RegisterOptions{Name: EraseActivity})
			env.OnGetVersion(closeWhenHandledChange, workflow.DefaultVersion, 1).Return(version)
			start := env.Now()
			var handled int
			var erasedAt time.Time
			env.OnActivity(HandleActivity, mock.Anything, HandleInput{InboundID: testInboundID}).Return(func(context.Context, HandleInput) (HandleResult, error) {
				handled++
				return HandleResult{Kind: "dsn", OrganizationID: 3, DomainID: 7, Effects: 1}, nil
			})
			env.OnActivity(EraseActivity, mock.Anything, EraseInput{InboundID: testInboundID}).Return(func(context.Context, EraseInput) error {
				erasedAt = env.Now()
				return nil
			})
			var upserted []temporal.SearchAttributes
			env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				upserted = append(upserted, args.Get(0).(temporal.SearchAttributes))
			}).Return(nil)
			retention := 7 * 24 * time.Hour
			env.ExecuteWorkflow(WorkflowName, Input{InboundID: testInboundID, Retention: retention})
			if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
				t.Fatalf("completed %v, error %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
			}
			var res Result
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			if res != (Result{Kind: "dsn", Effects: 1}) || handled != 1 {
				t.Fatalf("result %+v after %d handlings", res, handled)
			}
			if version == workflow.DefaultVersion {
				if got := erasedAt.Sub(start); got < retention || got > retention+time.Minute {
					t.Fatalf("erased %s after the start, want the retention %s", got, retention)
				}
			} else if ended := env.Now().Sub(start); ended != 0 || !erasedAt.IsZero() {
				t.Fatalf("the run ended %s after its start, erased at %v: it waited for the retention time", ended, erasedAt)
			}
			if len(upserted) != 1 {
				t.Fatalf("%d upserts of search attributes, want 1", len(upserted))
			}
			attrs := upserted[0]
			if v, ok := attrs.GetInt64(searchattr.OrganizationID); !ok || v != 3 {
				t.Fatalf("organization attribute %v %v", v, ok)
			}
			if v, ok := attrs.GetInt64(searchattr.DomainID); !ok || v != 7 {
				t.Fatalf("domain attribute %v %v", v, ok)
			}
		})
	}
}

// A message that concerns no email (unrecognized mail to the bounce host)
// sets no attributes; a handling that fails on infrastructure is retried
// until it succeeds.
func TestUnownedMessageAndRetriedHandling(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	env.RegisterActivityWithOptions(stubHandle, activity.RegisterOptions{Name: HandleActivity})
	env.RegisterActivityWithOptions(stubErase, activity.RegisterOptions{Name: EraseActivity})
	tries := 0
	env.OnActivity(HandleActivity, mock.Anything, mock.Anything).Return(func(context.Context, HandleInput) (HandleResult, error) {
		tries++
		if tries < 3 {
			return HandleResult{}, errors.New("database unreachable")
		}
		return HandleResult{Kind: "unrecognized"}, nil
	})
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Never()
	env.ExecuteWorkflow(WorkflowName, Input{InboundID: testInboundID, Retention: time.Hour})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if tries != 3 {
		t.Fatalf("handled in %d tries, want 3", tries)
	}
	env.AssertExpectations(t)
}
