package inbound

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/searchattr"
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
// at most), so a try ends well within the time-out.
//
// A local activity's retries end at its ScheduleToClose, which the SDK sets
// to the StartToClose when none is given: a minute, after which a message
// answered 250 would never be handled. A week outlasts any outage.
var handleOptions = workflow.LocalActivityOptions{
	ScheduleToCloseTimeout: 7 * 24 * time.Hour,
	StartToCloseTimeout:    time.Minute,
	RetryPolicy:            infrastructureRetry,
}

var eraseOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy:         infrastructureRetry,
}

// Workflow handles one inbound message.
//
// Change it only behind workflow.GetVersion: runs from before
// closeWhenHandledChange stay open for the retention time, and the replay
// tests hold histories of each version.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	var handled HandleResult
	lctx := workflow.WithLocalActivityOptions(ctx, handleOptions)
	if err := workflow.ExecuteLocalActivity(lctx, HandleActivity, HandleInput{InboundID: in.InboundID}).Get(ctx, &handled); err != nil {
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
	// time. Runs from before keep their timer.
	if workflow.GetVersion(ctx, closeWhenHandledChange, workflow.DefaultVersion, 1) == 1 {
		return Result{Kind: handled.Kind, Effects: handled.Effects}, nil
	}
	if in.Retention > 0 {
		if err := workflow.Sleep(ctx, in.Retention); err != nil {
			return Result{}, err
		}
	}
	ectx := workflow.WithActivityOptions(ctx, eraseOptions)
	if err := workflow.ExecuteActivity(ectx, EraseActivity, EraseInput{InboundID: in.InboundID}).Get(ctx, nil); err != nil {
		return Result{}, err
	}
	return Result{Kind: handled.Kind, Effects: handled.Effects}, nil
}

// closeWhenHandledChange is the workflow.GetVersion change id of runs that
// end once the message is handled, leaving its erasure to the retention
// sweep.
const closeWhenHandledChange = "close-when-handled"
