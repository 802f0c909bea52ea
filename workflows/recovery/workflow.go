package recovery

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// activityOptions: both activities only read and write the database and
// start workflows, so errors are infrastructure trouble, retried until they
// succeed.
var activityOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}

// Workflow redelivers a webhook's failed deliveries in the window, a page at
// a time, oldest first. Progress (the last delivery id handled) lives in the
// workflow's state, so a worker crash resumes where it stopped; the
// activity's per-recovery marker keeps a retried redelivery from sending
// twice.
//
// Change it only behind workflow.GetVersion: the replay tests hold
// histories of the current version.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	ctx = workflow.WithActivityOptions(ctx, activityOptions)
	logger := workflow.GetLogger(ctx)
	after, total := in.After, in.Redelivered
	for {
		var page ListResult
		list := ListInput{WebhookID: in.WebhookID, Since: in.Since, Until: in.Until, After: after, Limit: PageSize}
		if err := workflow.ExecuteActivity(ctx, ListFailedActivity, list).Get(ctx, &page); err != nil {
			return Result{}, err
		}
		for _, id := range page.DeliveryIDs {
			var r RedeliverResult
			if err := workflow.ExecuteActivity(ctx, RedeliverActivity, RedeliverInput{DeliveryID: id, RecoveryID: in.RecoveryID}).Get(ctx, &r); err != nil {
				return Result{}, err
			}
			if r.WebhookGone {
				logger.Info("recovery stopped: webhook disabled or deleted", "webhook_id", in.WebhookID, "redelivered", total)
				return Result{Redelivered: total, Stopped: true}, nil
			}
			if r.Redelivered {
				total++
			}
			after = id
		}
		if len(page.DeliveryIDs) < PageSize {
			logger.Info("recovery done", "webhook_id", in.WebhookID, "redelivered", total)
			return Result{Redelivered: total}, nil
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			next := in
			next.After, next.Redelivered = after, total
			return Result{}, workflow.NewContinueAsNewError(ctx, WorkflowName, next)
		}
	}
}
