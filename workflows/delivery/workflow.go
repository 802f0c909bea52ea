package delivery

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/workflows/internal/jitter"
)

// AttemptTimeout is the longest one attempt may run (StartToClose); the
// worker's stop timeout waits for it (worker/webhooks.go).
const AttemptTimeout = 30 * time.Second

// attemptOptions bound one attempt. The HTTP exchange itself is limited to
// 15 s by the webhook client; the rest is reading and writing the database.
// Activity errors are infrastructure trouble (database down, worker lost), not
// receiver failures, so they are retried until they succeed: the receiver's
// own schedule is walked by the workflow, not by this policy.
var attemptOptions = workflow.ActivityOptions{
	StartToCloseTimeout: AttemptTimeout,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}

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
		if err := workflow.ExecuteActivity(ctx, AttemptActivity, attempt).Get(ctx, &r); err != nil {
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
