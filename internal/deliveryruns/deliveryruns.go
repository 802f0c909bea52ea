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

// StartFirst starts the first attempt series of each delivery. It is safe to
// repeat, which is how an event whose first fan-out met an unavailable
// Temporal gets its missing workflows: a running series is reused, and a
// finished one is not started again.
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
		owners[d.ID] = store.DeliveryOwner{ID: d.ID, OrganizationID: d.OrganizationID, WebhookID: d.WebhookID}
	}
	return r.startFirst(ctx, ids, owners)
}

func (r *Runs) startFirst(ctx context.Context, ids []string, owners map[string]store.DeliveryOwner) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(startConcurrency)
	for _, id := range ids {
		g.Go(func() error {
			err := delivery.Start(ctx, r.Temporal, r.starting(id, owners[id], delivery.JoinOpen), r.input(id))
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

// StartAgain starts a new attempt series for a delivery that the caller has
// just moved from final (delivered or failed) to pending. A run still open
// under the delivery's workflow id is one that is only finishing: it has
// already recorded the final status the caller read, and will make no more
// attempts. It is terminated and replaced, so a retry right after the log
// turns final always starts a new series instead of racing the old run's
// last workflow task.
func (r *Runs) StartAgain(ctx context.Context, id string) error {
	return r.startReplacing(ctx, id, "")
}

// recoveryMemo names the memo field that says which recovery started a run.
const recoveryMemo = "recovery_id"

// StartForRecovery is StartAgain for a delivery a recovery reopened; the run
// carries the recovery's id in its memo (an id, visible in the Temporal UI),
// so that a retried redelivery can tell its own run from an older one.
func (r *Runs) StartForRecovery(ctx context.Context, id, recoveryID string) error {
	return r.startReplacing(ctx, id, recoveryID)
}

// RecoveryOfOpenRun returns the recovery id in the memo of the delivery's
// open run, and whether a run is open at all.
func (r *Runs) RecoveryOfOpenRun(ctx context.Context, id string) (recoveryID string, open bool, err error) {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, delivery.WorkflowID(id), "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return "", false, nil
	}
	if p, ok := info.GetMemo().GetFields()[recoveryMemo]; ok {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &recoveryID); err != nil {
			return "", true, err
		}
	}
	return recoveryID, true, nil
}

func (r *Runs) startReplacing(ctx context.Context, id, recoveryID string) error {
	owners, err := r.owners(ctx, []string{id})
	if err != nil {
		return err
	}
	s := r.starting(id, owners[id], delivery.ReplaceOpen)
	if recoveryID != "" {
		s.Memo = map[string]any{recoveryMemo: recoveryID}
	}
	return delivery.Start(ctx, r.Temporal, s, r.input(id))
}

// StartIfIdle starts a series for a pending delivery only if no run is open
// under its workflow id (ErrSeriesRunning otherwise): it gives a series to a
// delivery whose first start failed, and never a second one to a delivery
// whose series runs.
func (r *Runs) StartIfIdle(ctx context.Context, id string) error {
	owners, err := r.owners(ctx, []string{id})
	if err != nil {
		return err
	}
	err = delivery.Start(ctx, r.Temporal, r.starting(id, owners[id], delivery.OnlyIfIdle), r.input(id))
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
