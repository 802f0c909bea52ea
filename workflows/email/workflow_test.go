package email

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

	"github.com/mailyard/mailyard/workflows/internal/jitter"
)

const testEmailID = "0193a5c4-2f00-7000-8000-0000000000e1"

// The activities' signatures; the tests replace their behaviour with
// OnActivity.
func stubPrepare(context.Context, PrepareInput) (PrepareResult, error) {
	return PrepareResult{}, errors.New("not mocked")
}
func stubAttempt(context.Context, AttemptInput) (AttemptResult, error) {
	return AttemptResult{}, errors.New("not mocked")
}
func stubErase(context.Context, EraseInput) error { return errors.New("not mocked") }
func stubFirstAttempt(context.Context, FirstAttemptInput) (FirstAttemptResult, error) {
	return FirstAttemptResult{}, errors.New("not mocked")
}

// firstAttempt is the local prepare-and-attempt step made of a test's
// prepare and attempt mocks, as activities.Emails.FirstAttempt composes the
// real ones.
func firstAttempt(prepare func(context.Context, PrepareInput) (PrepareResult, error),
	attempt func(context.Context, AttemptInput) (AttemptResult, error)) func(context.Context, FirstAttemptInput) (FirstAttemptResult, error) {
	return func(ctx context.Context, in FirstAttemptInput) (FirstAttemptResult, error) {
		prep, err := prepare(ctx, PrepareInput{EmailID: in.EmailID})
		out := FirstAttemptResult{PrepareResult: prep}
		if err != nil || prep.Gone || prep.Pending == 0 || !in.Send {
			return out, err
		}
		out.Attempt, err = attempt(ctx, AttemptInput{EmailID: in.EmailID, Attempt: 1, Final: in.Final})
		out.Attempted = err == nil
		return out, err
	}
}

// steps records what the workflow asked for and when (workflow time).
type steps struct {
	env      *testsuite.TestWorkflowEnvironment
	attempts []AttemptInput
	times    []time.Time
	erasedAt time.Time
}

func newEnv(t *testing.T, prepare PrepareResult, attempts ...AttemptResult) (*testsuite.TestWorkflowEnvironment, *steps) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	env.RegisterActivityWithOptions(stubPrepare, activity.RegisterOptions{Name: PrepareActivity})
	env.RegisterActivityWithOptions(stubAttempt, activity.RegisterOptions{Name: AttemptActivity})
	env.RegisterActivityWithOptions(stubErase, activity.RegisterOptions{Name: EraseActivity})
	env.RegisterActivityWithOptions(stubFirstAttempt, activity.RegisterOptions{Name: FirstAttemptActivity})
	st := &steps{env: env}
	attempt := func(_ context.Context, in AttemptInput) (AttemptResult, error) {
		st.attempts = append(st.attempts, in)
		st.times = append(st.times, env.Now())
		return attempts[min(len(st.attempts), len(attempts))-1], nil
	}
	env.OnActivity(PrepareActivity, mock.Anything, mock.Anything).Return(prepare, nil)
	env.OnActivity(AttemptActivity, mock.Anything, mock.Anything).Return(attempt)
	env.OnActivity(FirstAttemptActivity, mock.Anything, mock.Anything).Return(firstAttempt(func(context.Context, PrepareInput) (PrepareResult, error) { return prepare, nil }, attempt))
	env.OnActivity(EraseActivity, mock.Anything, mock.Anything).Return(func(context.Context, EraseInput) error {
		st.erasedAt = env.Now()
		return nil
	})
	return env, st
}

func run(t *testing.T, env *testsuite.TestWorkflowEnvironment, in Input) Result {
	t.Helper()
	env.ExecuteWorkflow(WorkflowName, in)
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

// A run ends as soon as its email is settled: the retention sweep, not the
// workflow, erases the message later (internal/retention).
func TestDeliveredAtOnceEndsTheRun(t *testing.T) {
	env, st := newEnv(t, PrepareResult{Pending: 2}, AttemptResult{Delivered: 2})
	start := env.Now()
	r := run(t, env, Input{EmailID: testEmailID, Schedule: DefaultSchedule, Retention: DefaultRetention})
	if r != (Result{Status: StatusSent, Attempts: 1}) {
		t.Fatalf("result %+v", r)
	}
	if len(st.attempts) != 1 || st.attempts[0] != (AttemptInput{EmailID: testEmailID, Attempt: 1}) {
		t.Fatalf("attempts %+v", st.attempts)
	}
	if !st.times[0].Equal(start) {
		t.Fatalf("first attempt waited %s", st.times[0].Sub(start))
	}
	if ended := env.Now().Sub(start); ended != 0 || !st.erasedAt.IsZero() {
		t.Fatalf("the run ended %s after its start, erased at %v: it waited for the retention time", ended, st.erasedAt)
	}
}

// A run that began on version 1 of the version marker, before runs ended
// when settled, keeps its message for the retention time after the last
// attempt and erases it itself.
func TestRunOfVersionOneErasesAfterRetention(t *testing.T) {
	env, st := newEnv(t, PrepareResult{Pending: 2}, AttemptResult{Delivered: 2})
	env.OnGetVersion(oneVersionMarkerChange, workflow.DefaultVersion, closeWhenSettledVersion).Return(workflow.Version(1))
	r := run(t, env, Input{EmailID: testEmailID, Schedule: DefaultSchedule, Retention: DefaultRetention})
	if r != (Result{Status: StatusSent, Attempts: 1}) || len(st.attempts) != 1 {
		t.Fatalf("result %+v, attempts %+v", r, st.attempts)
	}
	if got := st.erasedAt.Sub(st.times[0]); got != DefaultRetention {
		t.Fatalf("erased %s after the last attempt, want %s", got, DefaultRetention)
	}
}

// Deferred recipients are retried on the schedule of docs/sending.md, with
// jitter, and the last attempt is marked final (the activity bounces what is
// still deferred then).
func TestDeferredWalksTheWholeSchedule(t *testing.T) {
	env, st := newEnv(t, PrepareResult{Pending: 1}, AttemptResult{Deferred: 1, Pending: 1})
	r := run(t, env, Input{EmailID: testEmailID, Schedule: DefaultSchedule, Retention: time.Hour})
	if r.Attempts != len(DefaultSchedule) || len(st.attempts) != len(DefaultSchedule) {
		t.Fatalf("%d attempts (result %+v), want %d", len(st.attempts), r, len(DefaultSchedule))
	}
	for i := 1; i < len(st.times); i++ {
		want := jitter.Spread(DefaultSchedule[i], testEmailID, i+1)
		if got := st.times[i].Sub(st.times[i-1]); got != want {
			t.Fatalf("wait before attempt %d: %s, want %s", i+1, got, want)
		}
		if lo, hi := DefaultSchedule[i]*8/10, DefaultSchedule[i]*12/10; want < lo || want > hi {
			t.Fatalf("wait %s outside ±20 %% of %s", want, DefaultSchedule[i])
		}
	}
	for i, a := range st.attempts {
		if a.Final != (i == len(DefaultSchedule)-1) || a.Attempt != i+1 {
			t.Fatalf("attempt %d: %+v", i+1, a)
		}
	}
}

// The schedule in the input is the one walked: changing the default does
// not change emails already on their way.
func TestScheduleComesFromInput(t *testing.T) {
	env, st := newEnv(t, PrepareResult{Pending: 1}, AttemptResult{Deferred: 1, Pending: 1}, AttemptResult{Delivered: 1})
	run(t, env, Input{EmailID: testEmailID, Schedule: []time.Duration{0, 10 * time.Second, time.Hour}, Retention: time.Hour})
	if len(st.attempts) != 2 {
		t.Fatalf("%d attempts", len(st.attempts))
	}
	if got, want := st.times[1].Sub(st.times[0]), jitter.Spread(10*time.Second, testEmailID, 2); got != want {
		t.Fatalf("second attempt after %s, want %s", got, want)
	}
}

// Nothing to send (every recipient suppressed): no attempt, and the run
// ends at once.
func TestNothingPendingMakesNoAttempt(t *testing.T) {
	env, st := newEnv(t, PrepareResult{Pending: 0}, AttemptResult{})
	start := env.Now()
	r := run(t, env, Input{EmailID: testEmailID, Schedule: DefaultSchedule, Retention: time.Hour})
	if r != (Result{Status: StatusSent}) || len(st.attempts) != 0 || !env.Now().Equal(start) {
		t.Fatalf("result %+v, attempts %d, ended after %s", r, len(st.attempts), env.Now().Sub(start))
	}
}

// An email the API removed (it could not confirm the start) ends the
// workflow at once.
func TestGoneEmailEnds(t *testing.T) {
	env, st := newEnv(t, PrepareResult{Gone: true}, AttemptResult{})
	r := run(t, env, Input{EmailID: testEmailID, Schedule: DefaultSchedule, Retention: time.Hour})
	if r.Status != StatusGone || len(st.attempts) != 0 || !st.erasedAt.IsZero() {
		t.Fatalf("result %+v, attempts %d", r, len(st.attempts))
	}
}

// A run canceled through Temporal once sending has begun (an operator in
// the Temporal UI), while it waits for the next attempt, erases the
// email's stored message before it ends: nothing will send it, and the
// email, never sent, is not the retention sweep's. Without the change's
// marker (a run from before) it ends at once and keeps the message.
func TestCanceledRunErasesTheEmail(t *testing.T) {
	for _, before := range []bool{false, true} {
		env, st := newEnv(t, PrepareResult{Pending: 1}, AttemptResult{Deferred: 1, Pending: 1})
		if before {
			env.OnGetVersion(canceledRunErasesChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
		}
		env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)
		start := env.Now()
		env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Schedule: DefaultSchedule, Retention: DefaultRetention, Version: CurrentVersion})
		if !env.IsWorkflowCompleted() || !temporal.IsCanceledError(env.GetWorkflowError()) {
			t.Fatalf("before %v: completed %v, error %v; want canceled", before, env.IsWorkflowCompleted(), env.GetWorkflowError())
		}
		if len(st.attempts) != 1 {
			t.Fatalf("before %v: %d attempts, want the first only", before, len(st.attempts))
		}
		if erased := !st.erasedAt.IsZero(); erased == before || (erased && st.erasedAt.Sub(start) != 30*time.Second) {
			t.Fatalf("before %v: erased at +%s (zero: not erased)", before, st.erasedAt.Sub(start))
		}
	}
}
