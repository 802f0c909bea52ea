// Package deliveryruns starts and stops webhook delivery workflows. The API
// (ingest, test events, retries) and the platform-event emitter both start
// them; this is the one place that knows the start options and what
// "already started" means. Only ids cross to Temporal; the activity reads
// everything else from the database.
package deliveryruns

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/sync/errgroup"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// Runs starts and cancels delivery workflows.
type Runs struct {
	Temporal client.Client
	// Store tells whose each delivery is, for the workflows' search
	// attributes; nil starts them without (tests of the start logic).
	Store *store.Store
	// Schedule overrides delivery.DefaultSchedule (tests, benchmarks). Every
	// start carries its schedule in the workflow's input.
	Schedule []time.Duration
	Logger   *slog.Logger
	// EagerStart asks the server to hand each new run's first workflow task
	// straight back to a worker of this process (Temporal's eager workflow
	// start), saving the matching service's dispatch. It only applies when a
	// worker on delivery.TaskQueue runs on the same client, as in `mailyard
	// dev`; otherwise the start is an ordinary one.
	EagerStart bool
}

// startConcurrency bounds the starts of one fan-out in flight at once.
const startConcurrency = 8

// NewDeliveryID returns a UUIDv7: unique, and ordered by creation time so the
// delivery log pages by id.
func NewDeliveryID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// StartFirst starts the current attempt series of each pending delivery:
// the first, or the one a retry or recovery reopened it to when that start
// failed. It is safe to repeat, which is how an event whose fan-out met an
// unavailable Temporal gets its missing workflows: a running series is
// reused, and a finished first series is not started again (a reopened
// delivery's run, started again once it has become final meanwhile, finds
// it final and sends nothing).
func (r *Runs) StartFirst(ctx context.Context, ids []string) error {
	owners, err := r.owners(ctx, ids)
	if err != nil {
		return err
	}
	return r.startFirst(ctx, ids, owners)
}

// StartFirstOf is StartFirst for the pending ones of deliveries just read or
// written, whose rows already say whose they are: it saves StartFirst's
// look-up of the owners (a round trip per ingested event).
func (r *Runs) StartFirstOf(ctx context.Context, ds []store.Delivery) error {
	ids := PendingIDs(ds)
	owners := make(map[string]store.DeliveryOwner, len(ids))
	for _, d := range ds {
		owners[d.ID] = store.DeliveryOwner{ID: d.ID, OrganizationID: d.OrganizationID, WebhookID: d.WebhookID, Series: d.Series}
	}
	return r.startFirst(ctx, ids, owners)
}

func (r *Runs) startFirst(ctx context.Context, ids []string, owners map[string]store.DeliveryOwner) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(startConcurrency)
	for _, id := range ids {
		g.Go(func() error {
			owner := owners[id]
			if owner.Series > 0 {
				// Reopened, and its own start failed: the first series' run
				// has closed, so a start that joins would start nothing.
				err := r.startIdle(ctx, r.seriesStarting(id, owner, owner.Series, ""))
				if errors.Is(err, ErrSeriesRunning) {
					return nil
				}
				return err
			}
			err := delivery.Start(ctx, r.Temporal, r.starting(id, owner, delivery.JoinOpen), r.input(id))
			var started *serviceerror.WorkflowExecutionAlreadyStarted
			if errors.As(err, &started) {
				return nil
			}
			return err
		})
	}
	return g.Wait()
}

// ErrSeriesRunning refuses a new series while the previous one still runs.
var ErrSeriesRunning = errors.New("the delivery's attempt series is still running")

// A delivery's attempt series are numbered (store.Delivery.Series: every
// reopen adds one), and the run of a series carries its number in its memo.
const (
	seriesMemo = "series"
	// recoveryMemo says which recovery started a run (an id, visible in
	// the Temporal UI).
	recoveryMemo = "recovery_id"
)

// StartAgain starts series number series for a delivery that the caller has
// just moved from final (delivered or failed) to pending. A run open under
// the delivery's workflow id is either one of an older series, only
// finishing (it has recorded the final status the caller read, and makes no
// more attempts), which is terminated and replaced, so that a retry right
// after the log turns final does not race the old run's last workflow task;
// or one of this very series, started by a concurrent retry or recovery
// (StartIfIdle, StartForRecovery), which is joined: replaced, it might
// already have sent.
func (r *Runs) StartAgain(ctx context.Context, id string, series int64) error {
	return r.startSeries(ctx, id, series, "")
}

// StartForRecovery is StartAgain for a delivery a recovery reopened (or
// found reopened by its own earlier try); the run carries the recovery's id
// in its memo too.
func (r *Runs) StartForRecovery(ctx context.Context, id string, series int64, recoveryID string) error {
	return r.startSeries(ctx, id, series, recoveryID)
}

// maxReplaces bounds how many older runs one start replaces: one is the
// rule; more means runs keep appearing under the id, and the caller is
// answered ErrSeriesRunning.
const maxReplaces = 2

func (r *Runs) startSeries(ctx context.Context, id string, series int64, recoveryID string) error {
	owners, err := r.owners(ctx, []string{id})
	if err != nil {
		return err
	}
	s := r.seriesStarting(id, owners[id], series, recoveryID)
	for range maxReplaces + 1 {
		err := delivery.Start(ctx, r.Temporal, s, r.input(id))
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if !errors.As(err, &started) {
			return err
		}
		open, err := r.seriesOf(ctx, id, started.RunId)
		if err != nil {
			return err
		}
		if open == series {
			return nil
		}
		err = r.Temporal.TerminateWorkflow(ctx, delivery.WorkflowID(id), started.RunId, "replaced by attempt series "+strconv.FormatInt(series, 10))
		var notFound *serviceerror.NotFound
		if err != nil && !errors.As(err, &notFound) {
			return err // NotFound: it has just closed by itself
		}
	}
	return ErrSeriesRunning
}

// seriesStarting is the start of series number series of a delivery, only
// if no run is open, with the series (and the recovery that starts it, if
// any) in the run's memo.
func (r *Runs) seriesStarting(id string, owner store.DeliveryOwner, series int64, recoveryID string) delivery.Starting {
	s := r.starting(id, owner, delivery.OnlyIfIdle)
	s.Memo = map[string]any{seriesMemo: series}
	if recoveryID != "" {
		s.Memo[recoveryMemo] = recoveryID
	}
	return s
}

// seriesOf returns the series number in the memo of one run of the
// delivery, -1 for a run started before series were numbered.
func (r *Runs) seriesOf(ctx context.Context, id, runID string) (int64, error) {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, delivery.WorkflowID(id), runID)
	if err != nil {
		return 0, err
	}
	p, ok := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[seriesMemo]
	if !ok {
		return -1, nil
	}
	var series int64
	return series, converter.GetDefaultDataConverter().FromPayload(p, &series)
}

// StartIfIdle starts series number series for a pending delivery only if no
// run is open under its workflow id (ErrSeriesRunning otherwise): it gives a
// series to a delivery whose start failed, and never a second one to a
// delivery whose series runs.
func (r *Runs) StartIfIdle(ctx context.Context, id string, series int64) error {
	owners, err := r.owners(ctx, []string{id})
	if err != nil {
		return err
	}
	return r.startIdle(ctx, r.seriesStarting(id, owners[id], series, ""))
}

func (r *Runs) startIdle(ctx context.Context, s delivery.Starting) error {
	err := delivery.Start(ctx, r.Temporal, s, r.input(s.DeliveryID))
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return ErrSeriesRunning
	}
	return err
}

// CancelInBackground asks the workflows of stopped deliveries to end. It is
// best effort: the database already says failed, and an attempt that still
// runs finds the webhook gone and sends nothing.
func (r *Runs) CancelInBackground(ids []string) {
	if len(ids) == 0 {
		return
	}
	stopped := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.cancelStartedBefore(ctx, ids, stopped)
	}()
}

// cancelStartedBefore cancels the open run of each delivery that is still
// failed and started before stopped, by its run id. A delivery no longer
// failed, or a run started since, is a new series (the webhook enabled again
// and the delivery retried or recovered, while a long list was still being
// canceled): canceled, it would leave the delivery pending with nothing to
// send it. The status is what decides; the start time, which compares this
// process's clock with the Temporal server's, only spares a run that the
// status has not caught up with yet. When ctx ends first, the rest is left
// (their attempts find the webhook stopped and send nothing), with one line
// in the log.
func (r *Runs) cancelStartedBefore(ctx context.Context, ids []string, stopped time.Time) {
	for i, id := range ids {
		if ctx.Err() != nil {
			if r.Logger != nil {
				r.Logger.Warn("cancel delivery workflows: out of time; the rest stop at their next attempt", "left", len(ids)-i)
			}
			return
		}
		err := r.cancelIfStillFailed(ctx, id, stopped)
		var notFound *serviceerror.NotFound
		if err != nil && !errors.As(err, &notFound) && ctx.Err() == nil && r.Logger != nil {
			r.Logger.Warn("cancel delivery workflow", "delivery_id", id, "error", err)
		}
	}
}

func (r *Runs) cancelIfStillFailed(ctx context.Context, id string, stopped time.Time) error {
	if r.Store != nil {
		failed, err := r.Store.DeliveryFailed(ctx, id)
		if err != nil || !failed {
			return err
		}
	}
	return r.cancelIfStartedBefore(ctx, delivery.WorkflowID(id), stopped)
}

func (r *Runs) cancelIfStartedBefore(ctx context.Context, workflowID string, stopped time.Time) error {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return err
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || info.GetStartTime().AsTime().After(stopped) {
		return nil
	}
	return r.Temporal.CancelWorkflow(ctx, workflowID, info.GetExecution().GetRunId())
}

func (r *Runs) starting(id string, o store.DeliveryOwner, mode delivery.StartMode) delivery.Starting {
	return delivery.Starting{DeliveryID: id, OrganizationID: o.OrganizationID, WebhookID: o.WebhookID, Mode: mode, Eager: r.EagerStart}
}

// owners reads whose the deliveries are (none without a Store).
func (r *Runs) owners(ctx context.Context, ids []string) (map[string]store.DeliveryOwner, error) {
	if r.Store == nil {
		return nil, nil
	}
	return r.Store.DeliveryOwners(ctx, ids)
}

// input carries the schedule in force now, so that changing the default
// never changes a series already on its way.
func (r *Runs) input(id string) delivery.Input {
	schedule := r.Schedule
	if len(schedule) == 0 {
		schedule = delivery.DefaultSchedule
	}
	return delivery.Input{DeliveryID: id, Schedule: schedule}
}

// PendingIDs lists the deliveries that still need a series.
func PendingIDs(ds []store.Delivery) []string {
	var ids []string
	for _, d := range ds {
		if d.Status == store.DeliveryPending {
			ids = append(ids, d.ID)
		}
	}
	return ids
}
