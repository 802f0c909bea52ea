package deletion

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Workflow finishes one domain's deletion. See the package comment.
func Workflow(ctx workflow.Context, in Input) error {
	p := &Progress{Stage: StageAnnouncing}
	if err := workflow.SetQueryHandler(ctx, ProgressQuery, func() (Progress, error) { return *p, nil }); err != nil {
		return err
	}
	actx := workflow.WithActivityOptions(ctx, activityOptions)
	if err := workflow.ExecuteActivity(actx, AnnounceActivity, in.DomainID).Get(ctx, nil); err != nil {
		return err
	}

	p.Stage, p.RemoveAt = StageRetaining, workflow.Now(ctx).Add(in.Retain)
	if err := workflow.Sleep(ctx, in.Retain); err != nil {
		return err
	}

	p.Stage = StageRemoving
	if err := workflow.ExecuteActivity(actx, UnpublishActivity, in.DomainID).Get(ctx, nil); err != nil {
		return err
	}
	p.Unpublished = true
	if err := workflow.ExecuteActivity(actx, EraseActivity, in.DomainID).Get(ctx, nil); err != nil {
		return err
	}
	p.Erased, p.Stage = true, StageDone
	workflow.GetLogger(ctx).Info("domain deletion finished", "DomainID", in.DomainID)
	return nil
}

// Each step is idempotent and retries until it succeeds: a publisher that is
// down (BIND stopped) delays the removal, never skips it.
var activityOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    5 * time.Minute,
	},
}
