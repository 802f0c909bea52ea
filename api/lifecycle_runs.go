package api

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/deletion"
	"github.com/mailyard/mailyard/workflows/onboarding"
	"github.com/mailyard/mailyard/workflows/rotation"
)

// rotateBudget bounds how long Rotate waits for the workflow to begin the
// rotation before answering from the database (a variable for tests).
var rotateBudget = 10 * time.Second

// domainLifecycle starts and talks to a domain's rotation and deletion
// workflows. Only ids and durations cross to Temporal.
type domainLifecycle struct {
	temporal     client.Client
	store        *store.Store
	retain       time.Duration
	recheckEvery time.Duration
}

func (l *domainLifecycle) rotationInput(domainID int64) rotation.Input {
	return rotation.Input{DomainID: domainID, Retain: l.retain, RecheckEvery: l.recheckEvery}
}

// Delete asks the domain's onboarding and rotation workflows to stop and starts
// its deletion workflow. Every part is safe to repeat.
func (l *domainLifecycle) Delete(ctx context.Context, orgID, domainID int64) error {
	for _, id := range []string{onboarding.WorkflowID(domainID), rotation.WorkflowID(domainID)} {
		err := l.temporal.CancelWorkflow(ctx, id, "")
		var notFound *serviceerror.NotFound
		if err != nil && !errors.As(err, &notFound) {
			return err
		}
	}
	err := deletion.Start(ctx, l.temporal, orgID, deletion.Input{DomainID: domainID, Retain: l.retain})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil // a finished deletion of this domain
	}
	return err
}

// Rotate asks the domain's rotation workflow (started if it is not running) to
// rotate now, and answers once the rotation has begun. If the workflow accepted
// the request but has not begun within the budget, the answer is built from the
// database: the rotation goes on either way.
func (l *domainLifecycle) Rotate(ctx context.Context, orgID, domainID int64) (RotationStarted, error) {
	ctx, cancel := context.WithTimeout(ctx, rotateBudget)
	defer cancel()
	handle, err := rotation.RotateNow(ctx, l.temporal, orgID, l.rotationInput(domainID))
	var st rotation.Status
	if err == nil {
		err = handle.Get(ctx, &st)
		if err != nil && outOfBudget(ctx) {
			return l.rotationFromStore(context.WithoutCancel(ctx), domainID)
		}
	}
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return RotationStarted{Status: st.Status, ActiveSelector: st.ActiveSelector, NextSelector: st.NextSelector}, nil
	case errors.As(err, &appErr) && appErr.Type() == rotation.ErrInProgressType:
		return RotationStarted{}, store.ErrRotationInProgress
	case errors.As(err, &appErr) && appErr.Type() == rotation.ErrDomainGoneType:
		return RotationStarted{}, store.ErrDomainNotVerified
	default:
		return RotationStarted{}, err
	}
}

// outOfBudget says whether ctx, a budget of WithTimeout, has run out. The
// SDK reports an update call cut by its deadline as the gRPC status
// (serviceerror.DeadlineExceeded inside a
// client.WorkflowUpdateServiceTimeoutOrCanceledError), which is not
// context.DeadlineExceeded, so the context is asked instead.
func outOfBudget(ctx context.Context) bool {
	return context.Cause(ctx) == context.DeadlineExceeded
}

// rotationFromStore describes a rotation the workflow accepted but has not begun.
func (l *domainLifecycle) rotationFromStore(ctx context.Context, domainID int64) (RotationStarted, error) {
	r, err := l.store.CurrentDKIMRotation(ctx, domainID)
	return RotationStarted{Status: rotation.StatusWaitingForDNS, ActiveSelector: r.ActiveSelector, NextSelector: r.StandbySelector}, err
}

// SettingsChanged tells the domain's rotation workflow (started if it is not
// running: a domain verified before rotation existed) to re-read its settings.
func (l *domainLifecycle) SettingsChanged(ctx context.Context, orgID, domainID int64) error {
	return rotation.SettingsChanged(ctx, l.temporal, orgID, l.rotationInput(domainID))
}
