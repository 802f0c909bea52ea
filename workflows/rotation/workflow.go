package rotation

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ErrDomainGoneType is the ApplicationError type with which activities say the
// domain was deleted (or is no longer verified): the workflow ends quietly.
const ErrDomainGoneType = "DomainGone"

// Workflow runs one rotation cycle of a domain, then continues as new.
func Workflow(ctx workflow.Context, in Input) error {
	logger := workflow.GetLogger(ctx)
	p := &Progress{Status: StatusIdle}
	requested, settingsChanged, ended := false, false, false

	if err := workflow.SetQueryHandler(ctx, ProgressQuery, func() (Progress, error) { return *p, nil }); err != nil {
		return err
	}
	settings := workflow.GetSignalChannel(ctx, SettingsSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for settings.Receive(ctx, nil) {
			settingsChanged = true
		}
	})
	if err := workflow.SetUpdateHandlerWithOptions(ctx, RotateUpdate,
		func(ctx workflow.Context) (Status, error) {
			requested = true
			if err := workflow.Await(ctx, func() bool { return p.Status != StatusIdle || ended }); err != nil {
				return Status{}, err
			}
			if ended {
				return Status{}, temporal.NewNonRetryableApplicationError("the domain has nothing to rotate", ErrDomainGoneType, nil)
			}
			return Status{Status: p.Status, ActiveSelector: p.ActiveSelector, NextSelector: p.NextSelector}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func() error {
			if requested || p.Status != StatusIdle {
				return temporal.NewApplicationError("a DKIM rotation is in progress", ErrInProgressType)
			}
			return nil
		}},
	); err != nil {
		return err
	}

	actx := workflow.WithActivityOptions(ctx, activityOptions)
	end := func(err error) error {
		ended = true
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == ErrDomainGoneType {
			logger.Info("domain gone; rotation workflow ends", "DomainID", in.DomainID)
			err = nil
		}
		if waitErr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); waitErr != nil {
			return waitErr
		}
		return err
	}

	// Wait for the next rotation: the timer, a rotate request, or new settings.
	for !requested {
		settingsChanged = false
		var plan Plan
		if err := workflow.ExecuteActivity(actx, LoadPlanActivity, in.DomainID).Get(ctx, &plan); err != nil {
			return end(err)
		}
		// New settings signalled while the plan loaded may be missing from
		// it: they wake the wait below at once, and the plan is loaded again.
		// Runs from before dropped them, and replay the same way.
		if settingsChanged && workflow.GetVersion(ctx, settingsDuringLoadChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			settingsChanged = false
		}
		if !plan.Active {
			return end(nil)
		}
		if plan.Status == StatusWaitingForDNS || plan.Status == StatusSwitched {
			// A previous run stopped half-way: finish that rotation.
			requested = true
			break
		}
		wake := func() bool { return requested || settingsChanged }
		if plan.Enabled {
			p.NextRotationAt = plan.NextRotationAt
			wait := plan.NextRotationAt.Sub(workflow.Now(ctx))
			if wait > 0 {
				woken, err := workflow.AwaitWithTimeout(ctx, wait, wake)
				if err != nil {
					return err
				}
				if !woken {
					// The interval is up. Since reload-before-rotating the
					// plan is loaded again first: settings stored while
					// their signal could not reach this run (the API then
					// answered 503) count, and a rotation turned off or
					// moved is not made now. Runs from before rotate at once.
					if workflow.GetVersion(ctx, reloadBeforeRotatingChange, workflow.DefaultVersion, 1) == 1 {
						continue
					}
					requested = true
				}
			} else {
				requested = true
			}
		} else {
			p.NextRotationAt = time.Time{}
			if err := workflow.Await(ctx, wake); err != nil {
				return err
			}
		}
		if !requested && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, WorkflowName, in)
		}
	}

	// 1. Begin, and confirm the standby key through the customer's CNAME.
	var st Status
	if err := workflow.ExecuteActivity(actx, BeginActivity, in.DomainID).Get(ctx, &st); err != nil {
		return end(err)
	}
	p.Status, p.ActiveSelector, p.NextSelector, p.NextRotationAt = st.Status, st.ActiveSelector, st.NextSelector, time.Time{}
	for p.Status == StatusWaitingForDNS {
		var visible bool
		if err := workflow.ExecuteActivity(actx, ConfirmStandbyActivity, in.DomainID).Get(ctx, &visible); err != nil {
			return end(err)
		}
		p.DNSChecks++
		if visible {
			break
		}
		logger.Info("standby key not yet visible through the customer's CNAME", "DomainID", in.DomainID, "Checks", p.DNSChecks)
		if err := workflow.Sleep(ctx, in.RecheckEvery); err != nil {
			return err
		}
		// A CNAME the customer removed keeps this loop going for as long as
		// it is missing; without a fresh run the history would reach
		// Temporal's limit, and the workflow would be terminated. The next
		// run finds the rotation waiting (LoadPlan) and goes on checking.
		if (p.DNSChecks%int(maxDNSChecksPerRun.Load()) == 0 || workflow.GetInfo(ctx).GetContinueAsNewSuggested()) &&
			workflow.GetVersion(ctx, dnsWaitContinueAsNew(p.DNSChecks), workflow.DefaultVersion, 1) == 1 {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, WorkflowName, in)
		}
	}

	// 2. Switch signing to the standby key; the old key stays published.
	if p.Status == StatusWaitingForDNS {
		if err := workflow.ExecuteActivity(actx, SwitchActivity, in.DomainID).Get(ctx, &st); err != nil {
			return end(err)
		}
		p.Status, p.ActiveSelector, p.NextSelector = st.Status, st.ActiveSelector, st.NextSelector
	}

	// 3. After the retain time, replace the old key with a fresh published one.
	p.ReplaceAt = workflow.Now(ctx).Add(in.Retain)
	if err := workflow.Sleep(ctx, in.Retain); err != nil {
		return err
	}
	if err := workflow.ExecuteActivity(actx, ReplaceActivity, in.DomainID).Get(ctx, nil); err != nil {
		return end(err)
	}
	p.Status, p.ReplaceAt = StatusDone, time.Time{}
	logger.Info("DKIM rotation done", "DomainID", in.DomainID, "ActiveSelector", p.ActiveSelector)

	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, WorkflowName, in)
}

// maxDNSChecksPerRun bounds the DNS checks of one run: about 11 history
// events each, so a run stays under Temporal's suggestion to continue as new
// (4 Ki events by default). Changing it changes where a run reads its
// version, so closed runs would no longer replay: it is a variable only so
// that tests can lower it (atomically: a test's workers may still run).
var maxDNSChecksPerRun = newLimit(300)

func newLimit(n int32) *atomic.Int32 {
	var l atomic.Int32
	l.Store(n)
	return &l
}

// dnsWaitContinueAsNew is the workflow.GetVersion change id, at a number of
// checks, of runs that continue as new during a long DNS wait: runs from
// before kept checking in one run, and replay the same way. The id names the
// check, because a run's first GetVersion of an id fixes its answer: a run
// from before that a new worker takes over answers DefaultVersion for the
// checks it replays, and continues as new at the first one it makes itself
// (at once when Temporal already suggests it, else at the next multiple of
// maxDNSChecksPerRun).
func dnsWaitContinueAsNew(checks int) string {
	return "dns-wait-continue-as-new/" + strconv.Itoa(checks)
}

// settingsDuringLoadChange is the workflow.GetVersion change id of runs that
// keep a settings signal received while the plan loads.
const settingsDuringLoadChange = "settings-during-load"

// reloadBeforeRotatingChange is the workflow.GetVersion change id of runs
// that load the plan again when the rotation interval is up, before they
// rotate.
const reloadBeforeRotatingChange = "reload-before-rotating"

// Every step retries until it succeeds: a publisher or database that is down
// delays a rotation, never fails it half-way. Each step is idempotent.
var activityOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        5 * time.Minute,
		NonRetryableErrorTypes: []string{ErrDomainGoneType},
	},
}
