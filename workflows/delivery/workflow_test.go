package delivery

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

const testDeliveryID = "0193a5c4-2f00-7000-8000-000000000001"

// stubAttempt is the activity's signature; the tests replace its behaviour
// with OnActivity.
func stubAttempt(context.Context, AttemptInput) (AttemptResult, error) {
	return AttemptResult{}, errors.New("not mocked")
}

// attemptLog records each attempt and the workflow time it was made at.
type attemptLog struct {
	env    *testsuite.TestWorkflowEnvironment
	inputs []AttemptInput
	times  []time.Time
}

func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *attemptLog) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	env.RegisterActivityWithOptions(stubAttempt, activity.RegisterOptions{Name: AttemptActivity})
	return env, &attemptLog{env: env}
}

// answer makes the mocked activity answer with results in turn, repeating the
// last one.
func (l *attemptLog) answer(results ...AttemptResult) {
	l.env.OnActivity(AttemptActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in AttemptInput) (AttemptResult, error) {
		l.inputs = append(l.inputs, in)
		l.times = append(l.times, l.env.Now())
		return results[min(len(l.inputs), len(results))-1], nil
	})
}

func (l *attemptLog) gap(i int) time.Duration { return l.times[i].Sub(l.times[i-1]) }

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

func TestDeliveredOnFirstAttempt(t *testing.T) {
	env, log := newEnv(t)
	log.answer(AttemptResult{Verdict: Delivered, StatusCode: 204})
	r := run(t, env, Input{DeliveryID: testDeliveryID})
	if r != (Result{Status: StatusDelivered, Attempts: 1, Verdict: Delivered}) {
		t.Fatalf("result %+v", r)
	}
	if len(log.inputs) != 1 || log.inputs[0] != (AttemptInput{DeliveryID: testDeliveryID, Attempt: 1}) {
		t.Fatalf("attempts %+v", log.inputs)
	}
}

// TestScheduleWalkedWithJitter skips through the whole default schedule (about
// 28 hours) and checks each wait against its step ±20 %.
func TestScheduleWalkedWithJitter(t *testing.T) {
	env, log := newEnv(t)
	log.answer(AttemptResult{Verdict: Retry, StatusCode: 500})
	r := run(t, env, Input{DeliveryID: testDeliveryID})
	if r != (Result{Status: StatusFailed, Attempts: 8, Verdict: Retry}) {
		t.Fatalf("result %+v", r)
	}
	if len(log.inputs) != len(DefaultSchedule) {
		t.Fatalf("%d attempts, want %d", len(log.inputs), len(DefaultSchedule))
	}
	for i, in := range log.inputs {
		if in.Attempt != i+1 || in.Final != (i == len(DefaultSchedule)-1) {
			t.Fatalf("attempt %d input %+v", i+1, in)
		}
		if i == 0 {
			continue
		}
		step := DefaultSchedule[i]
		lo, hi := time.Duration(float64(step)*0.8), time.Duration(float64(step)*1.2)
		if g := log.gap(i); g < lo || g > hi {
			t.Fatalf("wait before attempt %d is %s, want %s ±20 %%", i+1, g, step)
		}
	}
}

func TestGoneStopsAtOnce(t *testing.T) {
	for _, v := range []Verdict{ReceiverGone, WebhookGone} {
		t.Run(string(v), func(t *testing.T) {
			env, log := newEnv(t)
			log.answer(AttemptResult{Verdict: Retry, StatusCode: 502}, AttemptResult{Verdict: v, StatusCode: 410})
			r := run(t, env, Input{DeliveryID: testDeliveryID})
			if r.Status != StatusFailed || r.Attempts != 2 || r.Verdict != v || len(log.inputs) != 2 {
				t.Fatalf("result %+v after %d attempts", r, len(log.inputs))
			}
		})
	}
}

// TestRetryAfterClampedToNextTwoSteps: after attempt 2 the next steps are
// 5 min and 30 min, so a Retry-After is honoured between the (jittered) 5 min
// and 35 min.
func TestRetryAfterClampedToNextTwoSteps(t *testing.T) {
	next := jitter.Spread(DefaultSchedule[2], testDeliveryID, 3)
	cases := []struct {
		name       string
		retryAfter time.Duration
		want       time.Duration
	}{
		{"honoured", 15 * time.Minute, 15 * time.Minute},
		{"capped", 24 * time.Hour, 35 * time.Minute},
		{"never sooner than the schedule", time.Second, next},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, log := newEnv(t)
			log.answer(
				AttemptResult{Verdict: Retry, StatusCode: 503},
				AttemptResult{Verdict: Retry, StatusCode: 429, RetryAfter: c.retryAfter},
				AttemptResult{Verdict: Delivered, StatusCode: 200},
			)
			r := run(t, env, Input{DeliveryID: testDeliveryID})
			if r.Status != StatusDelivered || r.Attempts != 3 {
				t.Fatalf("result %+v", r)
			}
			if g := log.gap(2); g != c.want {
				t.Fatalf("wait after Retry-After %s is %s, want %s", c.retryAfter, g, c.want)
			}
		})
	}
}

func TestShortenedScheduleFromInput(t *testing.T) {
	env, log := newEnv(t)
	log.answer(AttemptResult{Verdict: Retry})
	r := run(t, env, Input{DeliveryID: testDeliveryID, Schedule: []time.Duration{0, time.Second}})
	if r.Attempts != 2 || !log.inputs[1].Final || log.gap(1) < 800*time.Millisecond || log.gap(1) > 1200*time.Millisecond {
		t.Fatalf("result %+v inputs %+v gap %s", r, log.inputs, log.gap(1))
	}
}

func TestCancelledWhileWaiting(t *testing.T) {
	env, log := newEnv(t)
	log.answer(AttemptResult{Verdict: Retry, StatusCode: 500})
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(WorkflowName, Input{DeliveryID: testDeliveryID})
	var canceled *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Fatalf("workflow error %v, want cancelled", err)
	}
	if len(log.inputs) != 2 {
		t.Fatalf("%d attempts before the cancel, want 2", len(log.inputs))
	}
}

func TestAttemptErrorEndsTheWorkflow(t *testing.T) {
	env, _ := newEnv(t)
	env.OnActivity(AttemptActivity, mock.Anything, mock.Anything).Return(AttemptResult{}, temporal.NewNonRetryableApplicationError("signing secret of webhook 1 cannot be decrypted", "SecretUnreadable", nil))
	env.ExecuteWorkflow(WorkflowName, Input{DeliveryID: testDeliveryID})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatal("workflow succeeded")
	}
}
