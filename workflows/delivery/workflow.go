package delivery

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/workflows/internal/jitter"
	"github.com/mailyard/mailyard/workflows/internal/localfirst"
)

// AttemptTimeout is the longest one attempt may run (StartToClose); the
// worker's stop timeout waits for it (worker/webhooks.go).
const AttemptTimeout = 30 * time.Second

// localAttemptChange versions the switch from a regular activity per attempt
// to a local activity (README, "Delivery attempts"). Runs started
// before it keep regular activities; new runs make local ones.
const localAttemptChange = "local-attempt"

// attemptOptions bound one attempt. The HTTP exchange itself is limited to
// 15 s by the webhook client; the rest is reading and writing the database.
// Activity errors are infrastructure trouble (database down, worker lost), not
// receiver failures, so they are retried until they succeed: the receiver's
// own schedule is walked by the workflow, not by this policy.
var attemptOptions = workflow.ActivityOptions{
	StartToCloseTimeout: AttemptTimeout,
	RetryPolicy:         attemptRetry,
}

var attemptRetry = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    time.Minute,
}

// localAttemptOptions bound one attempt made as a local activity: in the
// worker that runs the workflow task, with its result recorded as a marker in
// the workflow task's completion instead of three activity events and a
// second workflow task. Each try has the same 30 s as a regular attempt
// (StartToClose); the SDK keeps the workflow task alive (it heartbeats it
// before the 10 s workflow task timeout) while a try runs. An attempt whose
// quick tries all fail (the database down) goes on as a regular activity
// (localfirst), retried with attemptRetry. A worker lost mid-attempt is
// noticed when its workflow task times out, and the attempt is made again
// by another worker, as a regular activity's would be after its
// StartToClose.
var localAttemptOptions = localfirst.Options(AttemptTimeout)

// localStepFallbackChange is the workflow.GetVersion change id of runs
// whose local attempt, when its tries fail, goes on as a regular activity
// (recorded only in the runs where it happens); before it, the run retried
// the attempt locally for a week, then failed.
const localStepFallbackChange = "local-step-fallback"

// Workflow delivers one event to one webhook: an attempt after each wait of
// the schedule until one succeeds, the receiver answers 410, the webhook is
// deleted or disabled, or the schedule runs out.
//
// Change it only behind workflow.GetVersion: running deliveries last more
// than a day, and the replay tests hold histories of the current version.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	schedule := in.Schedule
	if len(schedule) == 0 {
		schedule = DefaultSchedule
	}
	ctx = workflow.WithActivityOptions(ctx, attemptOptions)
	logger := workflow.GetLogger(ctx)
	// One decision for the whole series: a run that began with regular
	// activities keeps them (its history has no marker here), a run of
	// local-attempt makes every attempt a local activity. Runs whose
	// starter wrote the version into their input record no marker: a
	// delivery's history is two events shorter and the run's visibility
	// record is not updated for TemporalChangeVersion. Histories with the
	// marker still replay (the SDK does not hold a version marker against
	// code that asks for none), so a run started by a new API on a worker
	// of before, which records it, replays on a new worker too.
	local := in.Version >= 1 || workflow.GetVersion(ctx, localAttemptChange, workflow.DefaultVersion, 1) == 1
	execute := func(ctx workflow.Context, input AttemptInput, result *AttemptResult) error {
		if local {
			return localfirst.Execute(ctx, localAttemptOptions, localStepFallbackChange, AttemptActivity, input, result)
		}
		return workflow.ExecuteActivity(ctx, AttemptActivity, input).Get(ctx, result)
	}

	var retryAfter time.Duration
	for i := range schedule {
		wait := jitter.Spread(schedule[i], in.DeliveryID, i+1)
		if retryAfter > 0 {
			wait = clampRetryAfter(retryAfter, schedule, i, wait)
		}
		if wait > 0 {
			if err := workflow.Sleep(ctx, wait); err != nil {
				return Result{}, err // cancelled: the webhook was deleted
			}
		}

		var r AttemptResult
		attempt := AttemptInput{DeliveryID: in.DeliveryID, Attempt: i + 1, Final: i == len(schedule)-1}
		if err := execute(ctx, attempt, &r); err != nil {
			return Result{}, err
		}
		logger.Info("delivery attempt", "delivery_id", in.DeliveryID, "attempt", i+1, "verdict", r.Verdict, "status_code", r.StatusCode)

		switch r.Verdict {
		case Delivered:
			return Result{Status: StatusDelivered, Attempts: i + 1, Verdict: r.Verdict}, nil
		case ReceiverGone, WebhookGone:
			return Result{Status: StatusFailed, Attempts: i + 1, Verdict: r.Verdict}, nil
		case AlreadyFinished:
			return Result{Attempts: i + 1, Verdict: r.Verdict}, nil
		}
		retryAfter = r.RetryAfter
	}
	return Result{Status: StatusFailed, Attempts: len(schedule), Verdict: Retry}, nil
}
