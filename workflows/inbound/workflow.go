package inbound

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/workflows/internal/localfirst"
)

// infrastructureRetry retries a step until the database answers: a message
// that was answered 250 must be handled.
var infrastructureRetry = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    time.Minute,
}

// handleOptions make handling a local activity: it runs in the worker that
// runs the workflow task and is recorded as one marker, so a report costs
// two workflow tasks instead of four, and its effects reach webhooks without
// a round trip through the task queue. Parsing is bounded (a 10 MiB message
// at most), so a try ends well within the time-out. When every try fails,
// handling goes on as a regular activity (stepOptions) until the database
// answers (localfirst).
var handleOptions = localfirst.Options(time.Minute)

// stepOptions bound a regular activity of the workflow: handling that
// failed its local tries, and erasing the message in runs of before.
var stepOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy:         infrastructureRetry,
}

// localStepFallbackChange is the workflow.GetVersion change id of runs
// whose handling, when its local tries fail, goes on as a regular activity
// (recorded only in the runs where it happens); before it, the run retried
// locally for a week, then failed.
const localStepFallbackChange = "local-step-fallback"

// Workflow handles one inbound message.
//
// Change it only behind workflow.GetVersion: runs from before
// closeWhenHandledChange stay open for the retention time, and the replay
// tests hold histories of each version.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	var handled HandleResult
	hctx := workflow.WithActivityOptions(ctx, stepOptions)
	if err := localfirst.Execute(hctx, handleOptions, localStepFallbackChange, HandleActivity, HandleInput{InboundID: in.InboundID}, &handled); err != nil {
		return Result{}, err
	}
	if handled.OrganizationID != 0 {
		owner := searchattr.Owner{OrganizationID: handled.OrganizationID, DomainID: handled.DomainID}
		if err := workflow.UpsertTypedSearchAttributes(ctx, owner.Updates()...); err != nil {
			return Result{}, err
		}
	}
	workflow.GetLogger(ctx).Info("inbound message handled", "inbound_id", in.InboundID, "kind", handled.Kind, "effects", handled.Effects)

	// Runs started since close-when-handled end here: the retention sweep
	// erases the message (internal/retention), so a handled message holds
	// no workflow open, durable timer and erase step for the retention
	// time. Runs from before keep their timer. Runs whose starter wrote the
	// version into their input record no marker: two history events fewer
	// and no visibility update for TemporalChangeVersion. Histories with
	// the marker still replay (the SDK does not hold a version marker
	// against code that asks for none), so a run started by a new listener
	// on a worker of before, which records it, replays on a new worker too.
	if in.Version >= 1 || workflow.GetVersion(ctx, closeWhenHandledChange, workflow.DefaultVersion, 1) == 1 {
		return Result{Kind: handled.Kind, Effects: handled.Effects}, nil
	}
	if in.Retention > 0 {
		if err := workflow.Sleep(ctx, in.Retention); err != nil {
			return Result{}, err
		}
	}
	ectx := workflow.WithActivityOptions(ctx, stepOptions)
	if err := workflow.ExecuteActivity(ectx, EraseActivity, EraseInput{InboundID: in.InboundID}).Get(ctx, nil); err != nil {
		return Result{}, err
	}
	return Result{Kind: handled.Kind, Effects: handled.Effects}, nil
}

// closeWhenHandledChange is the workflow.GetVersion change id of runs that
// end once the message is handled, leaving its erasure to the retention
// sweep.
const closeWhenHandledChange = "close-when-handled"
