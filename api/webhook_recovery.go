package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/recovery"
)

// RecoverInput is the window of a recovery.
type RecoverInput struct {
	ID   int64 `path:"id" doc:"Webhook id."`
	Body struct {
		Since time.Time  `json:"since" doc:"Start of the window (deliveries created at or after it), RFC 3339; at most 14 days back."`
		Until *time.Time `json:"until,omitempty" doc:"End of the window, RFC 3339; default now."`
	}
}

// RecoverData is the data of Recover failed deliveries.
type RecoverData struct {
	Recovered int `json:"recovered" doc:"How many failed deliveries the recovery sends again."`
}

func (s *Server) registerWebhookRecovery() {
	register(s, huma.Operation{
		OperationID: "recover-webhook", Method: http.MethodPost, Path: "/api/v1/webhooks/{id}/recover", DefaultStatus: http.StatusAccepted,
		Summary: "Recover failed deliveries", Tags: []string{"Webhooks"},
		Description: "Redelivers every failed delivery of the webhook created in [since, until], oldest first, each once, through the workflow " +
			"webhook-recovery:<webhook_id>:<uuid> on mailyard-webhooks. since is at most 14 days back.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadRequest},
	}, s.recoverWebhook)
}

func (s *Server) recoverWebhook(ctx context.Context, in *RecoverInput) (*Response[RecoverData], error) {
	w, err := s.ownWebhook(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	since, until := in.Body.Since.UTC(), now
	if in.Body.Until != nil && in.Body.Until.Before(now) {
		until = in.Body.Until.UTC()
	}
	if since.Before(now.Add(-recovery.MaxWindow)) {
		return nil, fieldError("body.since", "since must be at most 14 days back")
	}
	if since.After(until) {
		return nil, fieldError("body.since", "since must not be after until")
	}
	if w.Status != store.WebhookEnabled {
		return nil, errWebhookDisabled
	}
	n, err := s.store.CountFailedDeliveries(ctx, w.ID, since, until)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		recoveryID := uuid.NewString()
		err = recovery.Start(ctx, s.temporal, w.OrganizationID, recovery.Input{WebhookID: w.ID, RecoveryID: recoveryID, Since: since, Until: until})
		if err != nil {
			return nil, err
		}
	}
	return respond(RecoverData{Recovered: n}), nil
}
