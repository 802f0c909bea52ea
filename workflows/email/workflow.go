package email

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/workflows/internal/jitter"
	"github.com/mailyard/mailyard/workflows/internal/localfirst"
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
// for a day (runs from before closeWhenSettledVersion also stay open for the
// retention time), and the replay tests hold histories of the current
// version.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	schedule := in.Schedule
	if len(schedule) == 0 {
		schedule = DefaultSchedule
	}
	stepCtx := workflow.WithActivityOptions(ctx, stepOptions)

	// A run started since one-version-marker takes every change before it
	// at once, on one marker. Each workflow.GetVersion of a new run records
	// a marker and an upsert of the TemporalChangeVersion search attribute,
	// two history events per change that the server persists for every
	// email: one marker instead of two took an email's history from 21
	// events to 19 (deploy/README.md, "Sizing"). Runs from before keep the
	// markers they have.
	//
	// Version 2 of the marker closes the run once the email is settled:
	// the retention sweep erases its message (internal/retention), so a
	// sent email holds no workflow open, durable timer and erase step for
	// MAILYARD_EMAIL_RETENTION: its history is 8 events instead of 19.
	// Runs on version 1 keep their timer.
	//
	// Runs whose starter wrote the version into their input record no
	// marker at all: 6 events instead of 8, and no visibility update for
	// TemporalChangeVersion. Histories with the marker still replay (the
	// SDK does not hold a version marker against code that asks for
	// none), so a run started by a new API on a worker of before, which
	// records it, replays on a new worker too.
	marker := workflow.Version(in.Version)
	if in.Version == 0 {
		marker = workflow.GetVersion(ctx, oneVersionMarkerChange, workflow.DefaultVersion, closeWhenSettledVersion)
	}
	current := marker >= 1

	// Scheduled sending came with version 1: emails queued before it have
	// no marker here and go straight on, as they did.
	if current || workflow.GetVersion(ctx, scheduledSendChange, workflow.DefaultVersion, 1) == 1 {
		canceled, err := waitUntilScheduled(ctx, stepCtx, in)
		if err != nil || canceled {
			return Result{Status: StatusCanceled}, err
		}
	}

	// Since local-first-attempt, preparing the email and its first attempt
	// are one local activity: a marker in the workflow task that started
	// the run, instead of two activity tasks through the task queue, which
	// halves the time from the API's 202 to the recipients' 250 (README,
	// "Benchmarks"). Later attempts stay regular activities, with their
	// heartbeat. Runs that began before keep the two steps.
	var prep PrepareResult
	pending, attempts, next := 0, 0, 0
	if current || workflow.GetVersion(ctx, localFirstAttemptChange, workflow.DefaultVersion, 1) == 1 {
		send := jitter.Spread(schedule[0], in.EmailID, 1) == 0
		var first FirstAttemptResult
		// A step whose quick tries fail goes on as a regular activity,
		// an attempt's (localfirst); before local-step-fallback the run
		// retried it locally for a week, then failed.
		actx := workflow.WithActivityOptions(ctx, attemptOptions)
		err := localfirst.Execute(actx, firstAttemptOptions, localStepFallbackChange, FirstAttemptActivity,
			FirstAttemptInput{EmailID: in.EmailID, Send: send, Final: len(schedule) == 1}, &first)
		if err != nil {
			return Result{}, eraseCanceledRun(ctx, stepCtx, in.EmailID, err)
		}
		prep, pending = first.PrepareResult, first.Pending
		if first.Attempted {
			pending, attempts, next = first.Attempt.Pending, 1, 1
			logAttempt(ctx, in.EmailID, 1, first.Attempt)
		}
	} else {
		if err := workflow.ExecuteActivity(stepCtx, PrepareActivity, PrepareInput{EmailID: in.EmailID}).Get(ctx, &prep); err != nil {
			return Result{}, err
		}
		pending = prep.Pending
	}
	if prep.Gone {
		return Result{Status: StatusGone}, nil
	}

	attemptCtx := workflow.WithActivityOptions(ctx, attemptOptions)
	for i := next; i < len(schedule) && pending > 0; i++ {
		if wait := jitter.Spread(schedule[i], in.EmailID, i+1); wait > 0 {
			if err := workflow.Sleep(ctx, wait); err != nil {
				return Result{}, eraseCanceledRun(ctx, stepCtx, in.EmailID, err)
			}
		}
		var r AttemptResult
		attempt := AttemptInput{EmailID: in.EmailID, Attempt: i + 1, Final: i == len(schedule)-1}
		if err := workflow.ExecuteActivity(attemptCtx, AttemptActivity, attempt).Get(ctx, &r); err != nil {
			return Result{}, eraseCanceledRun(ctx, stepCtx, in.EmailID, err)
		}
		attempts = i + 1
		pending = r.Pending
		logAttempt(ctx, in.EmailID, attempts, r)
	}

	if marker >= closeWhenSettledVersion {
		return Result{Status: StatusSent, Attempts: attempts}, nil
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

func logAttempt(ctx workflow.Context, emailID string, attempt int, r AttemptResult) {
	workflow.GetLogger(ctx).Info("email attempt", "email_id", emailID, "attempt", attempt,
		"delivered", r.Delivered, "bounced", r.Bounced, "deferred", r.Deferred, "pending", r.Pending)
}

// oneVersionMarkerChange is the workflow.GetVersion change id of the one
// marker that stands for scheduledSendChange and localFirstAttemptChange in
// the runs started since.
const oneVersionMarkerChange = "one-version-marker"

// closeWhenSettledVersion is the version of oneVersionMarkerChange whose
// runs end when the email is settled, leaving the erasure of its message
// to the retention sweep.
const closeWhenSettledVersion = 2

// localFirstAttemptChange is the workflow.GetVersion change id of the
// first attempt made with the prepare step, as one local activity.
const localFirstAttemptChange = "local-first-attempt"

// firstAttemptOptions bound each try of the local prepare-and-attempt step
// like an attempt (attemptOptions); the SDK keeps the workflow task alive
// while it runs. A worker lost mid-step is noticed when its workflow task
// times out, and another worker runs the step again: the stored message and
// the recipients already recorded make that safe (docs/sending.md). When
// every try fails, the step goes on as a regular activity (localfirst).
var firstAttemptOptions = localfirst.Options(AttemptTimeout)

// localStepFallbackChange is the workflow.GetVersion change id of runs
// whose local prepare-and-attempt step, when its tries fail, goes on as a
// regular activity (recorded only in the runs where it happens).
const localStepFallbackChange = "local-step-fallback"

// scheduledSendChange is the workflow.GetVersion change id of scheduled
// sending (docs/sending.md).
const scheduledSendChange = "scheduled-send"

// updatesBeforeSendChange is the workflow.GetVersion change id of runs that,
// when their time comes while a reschedule or cancel is recording itself,
// let it finish before sending.
const updatesBeforeSendChange = "updates-before-send"

// reschedulesInOrderChange is the workflow.GetVersion change id of runs in
// which a reschedule whose step finished after another's writes the newer
// time again (recorded only in the runs where it happens).
const reschedulesInOrderChange = "reschedules-in-order"

// recordScheduledAt runs the reschedule step that stores written, then,
// while the time the run goes by (current) is another one, stores that: two
// reschedules at once run their steps side by side, and the one that
// commits last must not leave the store (and the message's date) at the
// older time while the run sends at the newer. Runs from before stopped
// after their step, and replay that way.
func recordScheduledAt(ctx, stepCtx workflow.Context, emailID string, written time.Time, current func() time.Time) error {
	for {
		err := workflow.ExecuteActivity(stepCtx, RescheduleActivity, RescheduleActivityInput{EmailID: emailID, ScheduledAt: written}).Get(ctx, nil)
		if err != nil || current().Equal(written) ||
			workflow.GetVersion(ctx, reschedulesInOrderChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return err
		}
		written = current()
	}
}

// canceledRunChange is the workflow.GetVersion change id of runs that,
// canceled through Temporal while the email waits for its time (an operator
// in the Temporal UI), record the email canceled before they end (recorded
// only in the runs where it happens).
const canceledRunChange = "canceled-run-cancels-email"

// recordCanceledRun stores the email canceled when err is the run's own
// cancellation, as the cancel update does, and returns err: otherwise the
// email would stay scheduled with no run to send or cancel it, and the
// API's cancel, finding no run, would start one. Runs from before ended at
// once, and replay that way.
func recordCanceledRun(ctx, stepCtx workflow.Context, emailID string, err error) error {
	return stepWhenCanceled(ctx, stepCtx, canceledRunChange, CancelActivity, CancelInput{EmailID: emailID}, err)
}

// stepWhenCanceled runs the step (activity with input) when err is the
// run's own cancellation and the run has the change, on a context the
// cancellation does not reach, and returns err (the step's error if it
// failed for good). The change is recorded only in the runs canceled.
func stepWhenCanceled(ctx, stepCtx workflow.Context, change, activity string, input any, err error) error {
	if !temporal.IsCanceledError(err) ||
		workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return err
	}
	disconnected, _ := workflow.NewDisconnectedContext(stepCtx)
	if serr := workflow.ExecuteActivity(disconnected, activity, input).Get(disconnected, nil); serr != nil {
		return serr
	}
	return err
}

// canceledRunErasesChange is the workflow.GetVersion change id of runs
// that, canceled through Temporal once sending has begun (an operator in
// the Temporal UI), erase the email's stored message before they end
// (recorded only in the runs where it happens).
const canceledRunErasesChange = "canceled-run-erases-email"

// eraseCanceledRun erases the email's stored content and signed messages
// when err is the run's own cancellation, and returns err. Nothing will
// send them: the pending recipients stay as they are, with no run to make
// another attempt, and the email never becomes sent, so the retention
// sweep would erase it only a month later, as an abandoned email
// (docs/sending.md, "Retention"). Runs from before ended at once, and
// replay that way.
func eraseCanceledRun(ctx, stepCtx workflow.Context, emailID string, err error) error {
	return stepWhenCanceled(ctx, stepCtx, canceledRunErasesChange, EraseActivity, EraseInput{EmailID: emailID}, err)
}

// waitUntilScheduled waits, for a scheduled email, until its time, on a
// durable timer the Temporal UI shows, while the reschedule and cancel
// updates may move or end the wait. Once it returns without canceled,
// sending has begun and both updates are refused. It reports whether the
// email was canceled.
func waitUntilScheduled(ctx, stepCtx workflow.Context, in Input) (canceled bool, err error) {
	at := time.Time{}
	if in.ScheduledAt != nil {
		at = *in.ScheduledAt
	}
	begun, changed, moves := at.IsZero(), false, 0
	notScheduled := func() error {
		if begun || canceled {
			return temporal.NewNonRetryableApplicationError("sending has begun; the email can no longer be changed", NotScheduledError, nil)
		}
		return nil
	}
	// Registered for every email, so an update to one that was never
	// scheduled (or is sending) gets the same refusal.
	err = workflow.SetUpdateHandlerWithOptions(ctx, RescheduleUpdate,
		func(ctx workflow.Context, r RescheduleInput) error {
			at, changed, moves = r.ScheduledAt, true, moves+1
			return recordScheduledAt(ctx, stepCtx, in.EmailID, r.ScheduledAt, func() time.Time { return at })
		},
		// Validators run only for new updates, never in replay: the limit
		// changes no history.
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r RescheduleInput) error {
			if err := notScheduled(); err != nil {
				return err
			}
			if moves >= MaxReschedules {
				return temporal.NewNonRetryableApplicationError("the email has been moved as often as an email may be; cancel it and send it again", MovedTooOftenError, nil)
			}
			return nil
		}})
	if err != nil {
		return false, err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, CancelUpdate,
		func(ctx workflow.Context) error {
			canceled = true
			return workflow.ExecuteActivity(stepCtx, CancelActivity, CancelInput{EmailID: in.EmailID}).Get(ctx, nil)
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context) error { return notScheduled() }})
	if err != nil {
		return false, err
	}
	for !begun && !canceled {
		if wait := at.Sub(workflow.Now(ctx)); wait > 0 {
			changed = false
			woken, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return changed || canceled })
			if err != nil {
				return false, recordCanceledRun(ctx, stepCtx, in.EmailID, err)
			}
			if woken {
				continue
			}
		}
		// It is time. A reschedule to a moment that has already come may
		// still be recording its time: sending now would date the message
		// at the old time, and the store would keep it. Its step goes
		// first; runs from before sent at once, and replay that way (the
		// version is read only while an update is in flight).
		if !workflow.AllHandlersFinished(ctx) &&
			workflow.GetVersion(ctx, updatesBeforeSendChange, workflow.DefaultVersion, 1) == 1 {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return false, recordCanceledRun(ctx, stepCtx, in.EmailID, err)
			}
			continue
		}
		break
	}
	if canceled {
		// The cancel's own step records it; end once it has.
		return true, workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	}
	begun = true
	return false, nil
}
