package email

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/workflows/internal/jitter"
)

// Activity errors are infrastructure trouble (database down, worker lost),
// not recipient failures, so they are retried until they succeed: the
// recipients' own schedule is walked by the workflow, not by these policies.
var infrastructureRetry = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    time.Minute,
}

// stepOptions bound the steps that only read and write the database (and
// sign, which takes milliseconds).
var stepOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy:         infrastructureRetry,
}

// AttemptTimeout is the longest one SMTP attempt may run (StartToClose); the
// worker's stop timeout waits for it (worker/emails.go), so a deploy does not
// cut an SMTP session in half.
const AttemptTimeout = 15 * time.Minute

// attemptOptions bound one SMTP attempt: a transaction per recipient
// domain, each command limited by the transport (docs/sending.md), for up to
// 50 recipients. The attempt heartbeats while it runs, so an attempt whose
// worker died is made again after the heartbeat timeout, not after the
// quarter of an hour a long attempt may legitimately take.
var attemptOptions = workflow.ActivityOptions{
	StartToCloseTimeout: AttemptTimeout,
	HeartbeatTimeout:    30 * time.Second,
	RetryPolicy:         infrastructureRetry,
}

// Workflow delivers one email.
//
// Change it only behind workflow.GetVersion: emails stay on their schedule
// for a day and their workflow open for the retention time, and the replay
// tests hold histories of the current version.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	schedule := in.Schedule
	if len(schedule) == 0 {
		schedule = DefaultSchedule
	}

	var prep PrepareResult
	stepCtx := workflow.WithActivityOptions(ctx, stepOptions)
	if err := workflow.ExecuteActivity(stepCtx, PrepareActivity, PrepareInput{EmailID: in.EmailID}).Get(ctx, &prep); err != nil {
		return Result{}, err
	}
	if prep.Gone {
		return Result{Status: StatusGone}, nil
	}

	attemptCtx := workflow.WithActivityOptions(ctx, attemptOptions)
	pending, attempts := prep.Pending, 0
	for i := 0; i < len(schedule) && pending > 0; i++ {
		if wait := jitter.Spread(schedule[i], in.EmailID, i+1); wait > 0 {
			if err := workflow.Sleep(ctx, wait); err != nil {
				return Result{}, err
			}
		}
		var r AttemptResult
		attempt := AttemptInput{EmailID: in.EmailID, Attempt: i + 1, Final: i == len(schedule)-1}
		if err := workflow.ExecuteActivity(attemptCtx, AttemptActivity, attempt).Get(ctx, &r); err != nil {
			return Result{}, err
		}
		attempts = i + 1
		pending = r.Pending
		workflow.GetLogger(ctx).Info("email attempt", "email_id", in.EmailID, "attempt", attempts,
			"delivered", r.Delivered, "bounced", r.Bounced, "deferred", r.Deferred, "pending", pending)
	}

	if in.Retention > 0 {
		if err := workflow.Sleep(ctx, in.Retention); err != nil {
			return Result{}, err
		}
	}
	if err := workflow.ExecuteActivity(stepCtx, EraseActivity, EraseInput{EmailID: in.EmailID}).Get(ctx, nil); err != nil {
		return Result{}, err
	}
	return Result{Status: StatusSent, Attempts: attempts}, nil
}
