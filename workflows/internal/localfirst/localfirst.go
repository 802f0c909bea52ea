// Package localfirst runs a workflow step as a local activity and, when its
// few quick tries all fail, as a regular activity.
//
// A local activity is one marker in the workflow task that ran it, which is
// what makes the email, inbound and webhook paths fast (README,
// "Benchmarks"). Its retries are not free the way a regular activity's are:
// each one whose backoff is longer than the workflow task timeout costs the
// history a marker, a timer and a workflow task. Retried for the days of an
// outage (the database down, a key that cannot be read), that grows the run's
// history past Temporal's limit (51,200 events) and the server ends the run,
// leaving its email queued or its message unhandled for good. A regular
// activity's retries are the server's and add nothing to the history until
// the activity ends, so the step goes on there, for as long as it takes.
package localfirst

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// NonRetryableChange is the workflow.GetVersion change id of runs whose
// local step ends at a non-retryable error instead of going on as a
// regular activity.
const NonRetryableChange = "non-retryable-ends-local-step"

// Tries is how often the local activity is tried: 1 s and 2 s apart, both
// waits shorter than the workflow task timeout (10 s), so they wait in the
// worker and add nothing to the history.
const Tries = 3

// Options are a local activity's options for a step whose tries each take
// at most startToClose.
func Options(startToClose time.Duration) workflow.LocalActivityOptions {
	return workflow.LocalActivityOptions{
		// Room for every try and the waits between them; the SDK would
		// otherwise end the retries at the first try's StartToClose.
		ScheduleToCloseTimeout: Tries*startToClose + 10*time.Second,
		StartToCloseTimeout:    startToClose,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    2 * time.Second,
			MaximumAttempts:    Tries,
		},
	}
}

// Execute runs activity with input as a local activity (options from
// Options) and stores its result in result. If every try fails, it runs the
// activity again as a regular activity with ctx's activity options, whose
// retries should have no end: a run records version 1 of changeID the first
// time that happens. Runs from before the change fail there, as they did
// (their histories replay).
//
// A non-retryable error (the step's own verdict, such as a webhook's signing
// secret that cannot be decrypted) ends the step at once: a regular
// activity would only meet the same verdict, or, finding the step's effect
// already recorded, return nothing and hide it, so that the run completed
// where it should fail for an operator to see. Runs record version 1 of
// NonRetryableChange when that happens; runs from before went on to the
// regular activity, and replay that way.
func Execute(ctx workflow.Context, local workflow.LocalActivityOptions, changeID, activity string, input, result any) error {
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, local), activity, input).Get(ctx, result)
	if err == nil || temporal.IsCanceledError(err) {
		return err
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() &&
		workflow.GetVersion(ctx, NonRetryableChange, workflow.DefaultVersion, 1) == 1 {
		return err
	}
	if workflow.GetVersion(ctx, changeID, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return err
	}
	workflow.GetLogger(ctx).Warn("local step failed; it goes on as a regular activity", "activity", activity, "error", err)
	return workflow.ExecuteActivity(ctx, activity, input).Get(ctx, result)
}
