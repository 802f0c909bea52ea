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
)

func stubReschedule(context.Context, RescheduleActivityInput) error { return errors.New("not mocked") }
func stubCancel(context.Context, CancelInput) error                 { return errors.New("not mocked") }

// scheduledEnv is newEnv with the scheduling steps, recording when Prepare
// ran (workflow time) and what the updates recorded.
type scheduledEnv struct {
	*testsuite.TestWorkflowEnvironment
	preparedAt   time.Time
	rescheduled  []time.Time
	canceled     int
	attemptCount int
	// deferFirst makes the first attempt defer the recipient.
	deferFirst bool
	// rescheduleTakes is how long the reschedule step takes (workflow time).
	rescheduleTakes time.Duration
	// slowReschedule, when set, is a time whose reschedule step takes
	// slowTakes instead.
	slowReschedule time.Time
	slowTakes      time.Duration
}

func newScheduledEnv(t *testing.T, options ...func(*scheduledEnv)) *scheduledEnv {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := &scheduledEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment()}
	for _, o := range options {
		o(env)
	}
	env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	env.RegisterActivityWithOptions(stubPrepare, activity.RegisterOptions{Name: PrepareActivity})
	env.RegisterActivityWithOptions(stubAttempt, activity.RegisterOptions{Name: AttemptActivity})
	env.RegisterActivityWithOptions(stubErase, activity.RegisterOptions{Name: EraseActivity})
	env.RegisterActivityWithOptions(stubReschedule, activity.RegisterOptions{Name: RescheduleActivity})
	env.RegisterActivityWithOptions(stubCancel, activity.RegisterOptions{Name: CancelActivity})
	env.RegisterActivityWithOptions(stubFirstAttempt, activity.RegisterOptions{Name: FirstAttemptActivity})
	prepare := func(context.Context, PrepareInput) (PrepareResult, error) {
		env.preparedAt = env.Now()
		return PrepareResult{Pending: 1}, nil
	}
	attempt := func(context.Context, AttemptInput) (AttemptResult, error) {
		env.attemptCount++
		if env.deferFirst && env.attemptCount == 1 {
			return AttemptResult{Deferred: 1, Pending: 1}, nil
		}
		return AttemptResult{Delivered: 1}, nil
	}
	env.OnActivity(PrepareActivity, mock.Anything, mock.Anything).Return(prepare)
	env.OnActivity(AttemptActivity, mock.Anything, mock.Anything).Return(attempt)
	env.OnActivity(FirstAttemptActivity, mock.Anything, mock.Anything).Return(firstAttempt(prepare, attempt))
	env.OnActivity(EraseActivity, mock.Anything, mock.Anything).Return(nil)
	reschedule := func(_ context.Context, in RescheduleActivityInput) error {
		env.rescheduled = append(env.rescheduled, in.ScheduledAt)
		return nil
	}
	if !env.slowReschedule.IsZero() {
		slow := mock.MatchedBy(func(in RescheduleActivityInput) bool { return in.ScheduledAt.Equal(env.slowReschedule) })
		env.OnActivity(RescheduleActivity, mock.Anything, slow).Return(reschedule).After(env.slowTakes)
	}
	env.OnActivity(RescheduleActivity, mock.Anything, mock.Anything).Return(reschedule).After(env.rescheduleTakes)
	env.OnActivity(CancelActivity, mock.Anything, mock.Anything).Return(func(context.Context, CancelInput) error {
		env.canceled++
		return nil
	})
	return env
}

// update sends an update at workflow time after and records its outcome.
type updateOutcome struct {
	accepted, rejected bool
	err                error
}

func (env *scheduledEnv) updateAt(after time.Duration, name string, out *updateOutcome, args ...any) {
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnAccept:   func() { out.accepted = true },
			OnReject:   func(err error) { out.rejected, out.err = true, err },
			OnComplete: func(_ any, err error) { out.err = err },
		}, args...)
	}, after)
}

func (env *scheduledEnv) result(t *testing.T) Result {
	t.Helper()
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

// The message is prepared (built and signed) only when the timer fires.
func TestScheduledEmailWaitsForItsTime(t *testing.T) {
	env := newScheduledEnv(t)
	start := env.Now()
	at := start.Add(9 * time.Hour)
	env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
	if r := env.result(t); r.Status != StatusSent || env.attemptCount != 1 {
		t.Fatalf("result %+v after %d attempts", r, env.attemptCount)
	}
	if !env.preparedAt.Equal(at) {
		t.Fatalf("prepared %s after the start, want at the scheduled time (%s)", env.preparedAt.Sub(start), at.Sub(start))
	}
}

// A reschedule moves the timer, later or earlier.
func TestRescheduleMovesTheTimer(t *testing.T) {
	for name, move := range map[string]time.Duration{"later": 20 * time.Hour, "earlier": 2 * time.Hour} {
		t.Run(name, func(t *testing.T) {
			env := newScheduledEnv(t)
			start := env.Now()
			at, moved := start.Add(9*time.Hour), start.Add(move)
			var out updateOutcome
			env.updateAt(time.Hour, RescheduleUpdate, &out, RescheduleInput{ScheduledAt: moved})
			env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
			env.result(t)
			if !out.accepted || out.err != nil || len(env.rescheduled) != 1 || !env.rescheduled[0].Equal(moved) {
				t.Fatalf("update %+v, recorded %v", out, env.rescheduled)
			}
			if !env.preparedAt.Equal(moved) {
				t.Fatalf("prepared at +%s, want +%s", env.preparedAt.Sub(start), move)
			}
		})
	}
}

// A reschedule to a moment that comes before its step has recorded it sends
// only once it has: the message is dated at the new time, which the store
// then holds.
func TestRescheduleRecordedBeforeSending(t *testing.T) {
	env := newScheduledEnv(t, func(env *scheduledEnv) { env.rescheduleTakes = 10 * time.Second })
	start := env.Now()
	at, moved := start.Add(9*time.Hour), start.Add(time.Hour+time.Second)
	var out updateOutcome
	env.updateAt(time.Hour, RescheduleUpdate, &out, RescheduleInput{ScheduledAt: moved})
	env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
	env.result(t)
	if !out.accepted || out.err != nil || len(env.rescheduled) != 1 {
		t.Fatalf("update %+v, recorded %v", out, env.rescheduled)
	}
	if recorded := start.Add(time.Hour + env.rescheduleTakes); env.preparedAt.Before(recorded) {
		t.Fatalf("prepared at +%s, before the new time was recorded at +%s", env.preparedAt.Sub(start), recorded.Sub(start))
	}
}

// Two reschedules whose steps commit in the other order (the first one's
// slower): the store ends at the time the run sends at, the second's, and
// the message is dated then. Before, it kept the first's.
func TestReschedulesRecordedInOrder(t *testing.T) {
	var start time.Time
	env := newScheduledEnv(t, func(env *scheduledEnv) {
		start = env.Now()
		env.slowReschedule, env.slowTakes = start.Add(5*time.Hour), 30*time.Minute
	})
	at, first, second := start.Add(9*time.Hour), start.Add(5*time.Hour), start.Add(6*time.Hour)
	var out1, out2 updateOutcome
	env.updateAt(time.Hour, RescheduleUpdate, &out1, RescheduleInput{ScheduledAt: first})
	env.updateAt(time.Hour+time.Minute, RescheduleUpdate, &out2, RescheduleInput{ScheduledAt: second})
	env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
	env.result(t)
	if out1.err != nil || out2.err != nil || len(env.rescheduled) == 0 || !env.rescheduled[len(env.rescheduled)-1].Equal(second) {
		t.Fatalf("updates %+v %+v, recorded %v: want the second time last", out1, out2, env.rescheduled)
	}
	if !env.preparedAt.Equal(second) {
		t.Fatalf("prepared at +%s, want +6h", env.preparedAt.Sub(start))
	}
}

// A run canceled through Temporal (an operator in the Temporal UI) while
// the email waits records the email canceled before it ends, as the cancel
// update would: before, the email stayed scheduled with no run.
func TestCanceledRunCancelsTheEmail(t *testing.T) {
	env := newScheduledEnv(t)
	at := env.Now().Add(9 * time.Hour)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
	env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
	if !env.IsWorkflowCompleted() || !temporal.IsCanceledError(env.GetWorkflowError()) {
		t.Fatalf("completed %v, error %v; want canceled", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	if env.canceled != 1 || !env.preparedAt.IsZero() {
		t.Fatalf("cancel recorded %d times, prepared %v", env.canceled, env.preparedAt)
	}
}

// A cancel before the time ends the workflow without sending.
func TestCancelBeforeTheTime(t *testing.T) {
	env := newScheduledEnv(t)
	at := env.Now().Add(9 * time.Hour)
	var out updateOutcome
	env.updateAt(time.Hour, CancelUpdate, &out)
	env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
	if r := env.result(t); r.Status != StatusCanceled {
		t.Fatalf("result %+v", r)
	}
	if !out.accepted || out.err != nil || env.canceled != 1 || !env.preparedAt.IsZero() || env.attemptCount != 0 {
		t.Fatalf("update %+v, canceled %d, prepared %v, attempts %d", out, env.canceled, env.preparedAt, env.attemptCount)
	}
}

// Once the timer has fired, both updates are refused by the validator with
// NotScheduledError; an email that was never scheduled refuses them too.
func TestUpdatesRefusedOnceSendingBegan(t *testing.T) {
	for name, scheduled := range map[string]bool{"after the time": true, "never scheduled": false} {
		t.Run(name, func(t *testing.T) {
			env := newScheduledEnv(t)
			// The first attempt defers the recipient, so the updates
			// arrive while the run waits for the second.
			env.deferFirst = true
			in := Input{EmailID: testEmailID, Schedule: []time.Duration{0, time.Hour}, Retention: time.Hour}
			if scheduled {
				at := env.Now().Add(time.Minute)
				in.ScheduledAt = &at
			}
			var cancel, reschedule updateOutcome
			env.updateAt(10*time.Minute, CancelUpdate, &cancel)
			env.updateAt(11*time.Minute, RescheduleUpdate, &reschedule, RescheduleInput{ScheduledAt: env.Now().Add(5 * time.Hour)})
			env.ExecuteWorkflow(WorkflowName, in)
			if r := env.result(t); r.Status != StatusSent {
				t.Fatalf("result %+v", r)
			}
			for _, o := range []updateOutcome{cancel, reschedule} {
				var app *temporal.ApplicationError
				if !o.rejected || !errors.As(o.err, &app) || app.Type() != NotScheduledError {
					t.Fatalf("update %+v, want refused with %s", o, NotScheduledError)
				}
			}
			if env.canceled != 0 || len(env.rescheduled) != 0 {
				t.Fatal("a refused update recorded something")
			}
		})
	}
}

// An email moved MaxReschedules times refuses the next move (Temporal would
// refuse every update, the cancel too, past 2,000 accepted ones; refused
// ones do not count), and can still be canceled.
func TestMovesAreLimitedAndTheCancelStays(t *testing.T) {
	defer func(n int) { MaxReschedules = n }(MaxReschedules)
	MaxReschedules = 3
	env := newScheduledEnv(t)
	at := env.Now().Add(24 * time.Hour)
	moves := make([]updateOutcome, MaxReschedules+1)
	for i := range moves {
		env.updateAt(time.Duration(i+1)*time.Minute, RescheduleUpdate, &moves[i], RescheduleInput{ScheduledAt: at.Add(time.Duration(i+1) * time.Hour)})
	}
	var cancel updateOutcome
	env.updateAt(time.Hour, CancelUpdate, &cancel)
	env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
	if r := env.result(t); r.Status != StatusCanceled {
		t.Fatalf("result %+v", r)
	}
	for i, o := range moves[:MaxReschedules] {
		if !o.accepted || o.err != nil {
			t.Fatalf("move %d: %+v", i+1, o)
		}
	}
	var app *temporal.ApplicationError
	if o := moves[MaxReschedules]; !o.rejected || !errors.As(o.err, &app) || app.Type() != MovedTooOftenError {
		t.Fatalf("move %d: %+v, want refused with %s", MaxReschedules+1, o, MovedTooOftenError)
	}
	if !cancel.accepted || cancel.err != nil || env.canceled != 1 || len(env.rescheduled) != MaxReschedules {
		t.Fatalf("cancel %+v, canceled %d, moves recorded %d", cancel, env.canceled, len(env.rescheduled))
	}
}

// A cancel that arrives in the same instant the timer fires: the workflow
// decides once, so either the email is canceled and nothing is prepared, or
// the cancel is refused and the email is sent; never both, never neither.
func TestCancelRacingTheTimer(t *testing.T) {
	env := newScheduledEnv(t)
	at := env.Now().Add(time.Hour)
	var out updateOutcome
	env.updateAt(time.Hour, CancelUpdate, &out)
	env.ExecuteWorkflow(WorkflowName, Input{EmailID: testEmailID, Retention: time.Hour, ScheduledAt: &at})
	r := env.result(t)
	switch {
	case r.Status == StatusCanceled && out.accepted && env.canceled == 1 && env.preparedAt.IsZero():
	case r.Status == StatusSent && out.rejected && env.canceled == 0 && env.attemptCount == 1:
	default:
		t.Fatalf("result %+v, update %+v, canceled %d, prepared %v", r, out, env.canceled, env.preparedAt)
	}
}
