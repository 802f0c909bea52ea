package onboarding

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Workflow onboards one domain. See the package comment.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	logger := workflow.GetLogger(ctx)
	if in.WindowStart.IsZero() {
		in.WindowStart = workflow.Now(ctx)
	}
	p := &Progress{Stage: StageGeneratingKeys, Status: StatusPending, WindowStart: in.WindowStart}
	if in.KeysPublished {
		p.Stage = StageChecking
	}

	if err := workflow.SetQueryHandler(ctx, ProgressQuery, func() (Progress, error) { return *p, nil }); err != nil {
		return Result{}, err
	}
	checkCtx := workflow.WithActivityOptions(ctx, checkOptions)
	check := func(ctx workflow.Context) error {
		var res CheckResult
		if err := workflow.ExecuteActivity(ctx, CheckRecordsActivity, in.DomainID).Get(ctx, &res); err != nil {
			return err
		}
		p.Checks++
		p.LastCheck = res
		// Never step back: a verify that raced the main loop may already have
		// seen the domain verified.
		if p.Status == StatusPending {
			p.Status = res.Status
		}
		return nil
	}
	// verifying counts the verify updates under way.
	verifying := 0
	if err := workflow.SetUpdateHandlerWithOptions(ctx, VerifyUpdate,
		func(ctx workflow.Context) (VerifyResult, error) {
			verifying++
			defer func() { verifying-- }()
			// A check before the keys are published could verify the
			// domain, whose mail would then be signed with a key that
			// receivers cannot find (or with none yet): the check waits
			// for them. Runs from before verify-after-keys checked at once.
			if !in.KeysPublished && workflow.GetVersion(ctx, verifyAfterKeysChange, workflow.DefaultVersion, 1) == 1 {
				if err := workflow.Await(ctx, func() bool { return in.KeysPublished }); err != nil {
					return VerifyResult{}, err
				}
			}
			if err := check(workflow.WithActivityOptions(ctx, checkOptions)); err != nil {
				return VerifyResult{}, err
			}
			return VerifyResult{Status: p.Status}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func() error {
			// A finished run cannot check any more; the API checks directly.
			if p.Stage == StageDone {
				return errors.New("onboarding is finished")
			}
			return nil
		}},
	); err != nil {
		return Result{}, err
	}

	if !in.KeysPublished {
		keyCtx := workflow.WithActivityOptions(ctx, keyOptions)
		if err := workflow.ExecuteActivity(keyCtx, GenerateKeysActivity, in.DomainID).Get(keyCtx, nil); err != nil {
			return Result{}, err
		}
		p.Stage = StagePublishingKeys
		if err := workflow.ExecuteActivity(keyCtx, PublishKeysActivity, in.DomainID).Get(keyCtx, nil); err != nil {
			return Result{}, err
		}
		in.KeysPublished = true
		p.Stage = StageChecking
	}

	for p.Status == StatusPending {
		if err := check(checkCtx); err != nil {
			return Result{}, err
		}
		if p.Status != StatusPending {
			break
		}
		wait, open := NextWait(in.Schedule, workflow.Now(ctx).Sub(in.WindowStart))
		if !open {
			var status string
			if err := workflow.ExecuteActivity(checkCtx, FailDomainActivity, in.DomainID, in.WindowStart).Get(checkCtx, &status); err != nil {
				return Result{}, err
			}
			// A verify update may settle the domain meanwhile (Verify domain
			// reopened the window after this one failed, and its check
			// passes): the checks under way are waited for, their status
			// stands, and a verified domain still gets its effects below.
			// Runs from before keep-settled-status took the activity's
			// answer.
			if (p.Status == StatusPending && verifying == 0) ||
				workflow.GetVersion(ctx, keepSettledStatusChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				p.Status = status
			} else {
				if err := workflow.Await(ctx, func() bool { return verifying == 0 }); err != nil {
					return Result{}, err
				}
				if p.Status == StatusPending {
					p.Status = status
				}
			}
			// Pending: the window was reopened while this run closed it.
			// The new window's run is started by the API's sweep of
			// pending domains without one.
			logger.Info("verification window closed", "DomainID", in.DomainID, "Status", p.Status)
			break
		}
		p.NextCheckAt = workflow.Now(ctx).Add(wait)
		// A verify update may settle the status while we wait. Since
		// continue-while-waiting, the run also stops waiting when Temporal
		// suggests continuing as new, which it does at 90 % of a run's
		// 2,000 updates: a client that verified more than once a second
		// passed that limit within one wait (up to half an hour), and
		// every verify after was refused. Runs from before waited it out.
		wakeToContinue := workflow.GetVersion(ctx, continueWhileWaitingChange, workflow.DefaultVersion, 1) == 1
		if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool {
			return p.Status != StatusPending || wakeToContinue && workflow.GetInfo(ctx).GetContinueAsNewSuggested()
		}); err != nil {
			return Result{}, err
		}
		if p.Status == StatusPending && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return Result{}, err
			}
			return Result{}, workflow.NewContinueAsNewError(ctx, WorkflowName, in)
		}
	}

	if p.Status == StatusVerified &&
		workflow.GetVersion(ctx, VerifiedEffectsChange, workflow.DefaultVersion, 1) == 1 {
		if err := workflow.ExecuteActivity(checkCtx, VerifiedActivity, in.DomainID).Get(checkCtx, nil); err != nil {
			return Result{}, err
		}
	}

	p.Stage = StageDone
	p.NextCheckAt = time.Time{}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return Result{}, err
	}
	logger.Info("onboarding finished", "DomainID", in.DomainID, "Status", p.Status)
	return Result{Status: p.Status}, nil
}

// keepSettledStatusChange is the workflow.GetVersion change id of runs that,
// closing the window while verify updates are under way (or have settled the
// domain), wait for them and keep the status they settle; it is recorded
// only in runs where that happens.
const keepSettledStatusChange = "keep-settled-status"

// continueWhileWaitingChange is the workflow.GetVersion change id of runs
// that stop waiting for their next check when Temporal suggests continuing
// as new.
const continueWhileWaitingChange = "continue-while-waiting"

// verifyAfterKeysChange is the workflow.GetVersion change id of runs whose
// verify update, sent while the keys are generated or published, waits for
// them before it checks.
const verifyAfterKeysChange = "verify-after-keys"

// Key generation and publishing retry until they succeed: a publisher that is down
// (BIND restarting) must delay onboarding, not fail it.
var keyOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    5 * time.Minute,
	},
}

// A check answers within 10 s (README "Verify"); database hiccups are retried.
var checkOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 15 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}
