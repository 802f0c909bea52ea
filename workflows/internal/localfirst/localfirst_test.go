package localfirst

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

const (
	testChange   = "test-fallback"
	testActivity = "Step"
)

// step fails every local try and succeeds as a regular activity, counting
// both; with verdict, its local tries fail with a non-retryable error.
type step struct {
	local, regular int
	verdict        bool
}

func (s *step) run(ctx context.Context, in string) (string, error) {
	if activity.GetInfo(ctx).IsLocalActivity {
		s.local++
		if s.verdict {
			return "", temporal.NewNonRetryableApplicationError("the secret cannot be read", "SecretUnreadable", nil)
		}
		return "", errors.New("the database is down")
	}
	s.regular++
	return "done " + in, nil
}

func stepWorkflow(ctx workflow.Context, in string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second}})
	var out string
	err := Execute(ctx, Options(30*time.Second), testChange, testActivity, in, &out)
	return out, err
}

func newEnv(s *step) *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(stepWorkflow)
	env.RegisterActivityWithOptions(s.run, activity.RegisterOptions{Name: testActivity})
	return env
}

// Three quick local tries, then the step goes on as a regular activity,
// whose result the workflow gets.
func TestFailedLocalStepGoesOnAsARegularActivity(t *testing.T) {
	s := &step{}
	env := newEnv(s)
	env.ExecuteWorkflow(stepWorkflow, "x")
	var out string
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if err := env.GetWorkflowResult(&out); err != nil || out != "done x" {
		t.Fatalf("result %q, %v", out, err)
	}
	if s.local != Tries || s.regular != 1 {
		t.Fatalf("%d local tries and %d regular ones, want %d and 1", s.local, s.regular, Tries)
	}
}

// A run from before the change (no version recorded at the fallback) fails
// as it did.
func TestRunFromBeforeTheChangeFails(t *testing.T) {
	s := &step{}
	env := newEnv(s)
	env.OnGetVersion(testChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(stepWorkflow, "x")
	if err := env.GetWorkflowError(); err == nil || s.regular != 0 {
		t.Fatalf("error %v after %d regular tries, want the local step's error and none", err, s.regular)
	}
}

// The local tries' waits stay within the workflow task timeout, so they
// wait in the worker and add nothing to the history.
func TestLocalWaitsStayWithinTheWorkflowTaskTimeout(t *testing.T) {
	p := Options(time.Minute).RetryPolicy
	wait, total := p.InitialInterval, time.Duration(0)
	for range Tries - 1 {
		if wait > 10*time.Second || wait > p.MaximumInterval {
			t.Fatalf("a wait of %s", wait)
		}
		total += wait
		wait = time.Duration(float64(wait) * p.BackoffCoefficient)
	}
	if o := Options(time.Minute); o.ScheduleToCloseTimeout < Tries*o.StartToCloseTimeout+total {
		t.Fatalf("ScheduleToClose %s leaves no room for %d tries of %s", o.ScheduleToCloseTimeout, Tries, o.StartToCloseTimeout)
	}
}

// A non-retryable error ends the step at its first try: the run fails with
// it, and no regular activity runs (which, finding the step's effect
// recorded, used to return nothing, and the run completed). A run from
// before the change goes on to the regular activity, as it did.
func TestNonRetryableErrorEndsTheStep(t *testing.T) {
	s := &step{verdict: true}
	env := newEnv(s)
	env.ExecuteWorkflow(stepWorkflow, "x")
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != "SecretUnreadable" || s.local != 1 || s.regular != 0 {
		t.Fatalf("error %v after %d local and %d regular tries, want SecretUnreadable after 1 and 0", err, s.local, s.regular)
	}

	s = &step{verdict: true}
	env = newEnv(s)
	env.OnGetVersion(NonRetryableChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(stepWorkflow, "x")
	if err := env.GetWorkflowError(); err != nil || s.regular != 1 {
		t.Fatalf("a run from before: error %v after %d regular tries, want the regular activity's result", err, s.regular)
	}
}
