package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/webhook"
)

// MaxWebhooksPerOrganization is the limit of docs/webhooks.md. Creating one more
// answers 409 webhook_limit_reached: the request is valid, the organization's
// state refuses it until a webhook is deleted.
const MaxWebhooksPerOrganization = 20

// Webhook is a subscription as the API shows it.
type Webhook struct {
	ID         int64            `json:"id" example:"1"`
	URL        string           `json:"url" example:"https://hooks.example.com/mailyard"`
	EventTypes []eventtype.Type `json:"event_types" example:"[\"delivered\",\"bounced\"]"`
	CreatedAt  time.Time        `json:"created_at"`
	Status     string           `json:"status" enum:"enabled,disabled" doc:"disabled: nothing is sent until the webhook is enabled again (Update webhook)."`
	// The enum tag lists the non-null values; null means enabled.
	DisabledReason *string    `json:"disabled_reason" nullable:"true" enum:"manual,receiver_gone,failing" doc:"Why the webhook is disabled: manual (Update webhook), receiver_gone (the receiver answered 410 Gone), failing (no 2xx answer for MAILYARD_WEBHOOK_DISABLE_AFTER when a delivery ran out of retries). null while enabled."`
	DisabledAt     *time.Time `json:"disabled_at" nullable:"true"`
}

func webhookFromStore(w *store.Webhook) Webhook {
	return Webhook{
		ID: w.ID, URL: w.URL, EventTypes: eventtype.FromStrings(w.EventTypes), CreatedAt: w.CreatedAt.UTC(), Status: w.Status,
		DisabledReason: w.DisabledReason, DisabledAt: utc(w.DisabledAt),
	}
}

// CreateWebhookInput is the body of Create webhook.
type CreateWebhookInput struct {
	Body struct {
		URL        string           `json:"url" doc:"https:// URL that receives the events, at most 2048 characters." example:"https://hooks.example.com/mailyard"`
		EventTypes []eventtype.Type `json:"event_types" minItems:"1" uniqueItems:"true" doc:"Events to receive: email events and platform events (domain.*, webhook.disabled)."`
	}
}

// UpdateWebhookInput changes any of a webhook's URL, event types and status.
type UpdateWebhookInput struct {
	ID   int64 `path:"id" doc:"Webhook id."`
	Body struct {
		URL        *string          `json:"url,omitempty" doc:"New https:// URL, validated like on create."`
		EventTypes []eventtype.Type `json:"event_types,omitempty" minItems:"1" uniqueItems:"true" doc:"New event types, replacing the old ones."`
		Status     *string          `json:"status,omitempty" enum:"enabled,disabled" doc:"enabled clears disabled_reason and restarts the failure clock; disabled (reason manual) stops pending deliveries like a delete."`
	}
}

// MaxPreviousSecrets is how many replaced secrets may still be valid at once.
const MaxPreviousSecrets = 5

// RotateSecretInput sets how long the replaced secret stays valid.
type RotateSecretInput struct {
	ID   int64 `path:"id" doc:"Webhook id."`
	Body *struct {
		ExpirePreviousInSeconds *int `json:"expire_previous_in_seconds,omitempty" minimum:"0" maximum:"604800" default:"86400" doc:"How long the replaced secret keeps signing (0: at once, ending every overlap)."`
	}
}

// RotatedSecretData is the data of Rotate signing secret.
type RotatedSecretData struct {
	SigningSecret           string    `json:"signing_secret" example:"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`
	PreviousSecretExpiresAt time.Time `json:"previous_secret_expires_at" doc:"When the replaced secret stops signing. X-Service-Signature uses the oldest unexpired secret: after one rotation it switches to the new secret then."`
}

// CreateWebhookData is the data of Create webhook: the secret is shown beside
// the webhook, and again by Get signing secret.
type CreateWebhookData struct {
	Webhook       Webhook `json:"webhook"`
	SigningSecret string  `json:"signing_secret" example:"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" doc:"Keys both signatures of every delivery."`
}

// WebhookList is the data of List webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
	PageInfo
}

// ListWebhooksInput pages through the webhooks.
type ListWebhooksInput struct {
	PageQuery
}

// WebhookData wraps one webhook.
type WebhookData struct {
	Webhook Webhook `json:"webhook"`
}

// SigningSecretData is the data of Get signing secret.
type SigningSecretData struct {
	WebhookID     int64  `json:"webhook_id" example:"1"`
	SigningSecret string `json:"signing_secret" example:"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`
}

// WebhookIDInput names a webhook in the path.
type WebhookIDInput struct {
	ID int64 `path:"id" doc:"Webhook id."`
}

func (s *Server) registerWebhooks() {
	tags := []string{"Webhooks"}
	register(s, huma.Operation{
		OperationID: "create-webhook", Method: http.MethodPost, Path: "/api/v1/webhooks", DefaultStatus: http.StatusCreated,
		Summary: "Create webhook", Tags: tags,
		Description: fmt.Sprintf("Subscribes an https:// URL to email and platform events and returns its signing secret. At most %d webhooks per organization (409 %s).", MaxWebhooksPerOrganization, CodeWebhookLimitReached),
		Errors:      []int{http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadRequest, http.StatusRequestEntityTooLarge},
	}, s.createWebhook)
	register(s, huma.Operation{
		OperationID: "list-webhooks", Method: http.MethodGet, Path: "/api/v1/webhooks",
		Summary: "List webhooks", Tags: tags,
		Description: "The organization's webhooks, oldest first: all of them, or a page with limit and cursor.",
		Errors:      []int{http.StatusUnprocessableEntity},
	}, s.listWebhooks)
	register(s, huma.Operation{
		OperationID: "get-webhook", Method: http.MethodGet, Path: "/api/v1/webhooks/{id}",
		Summary: "Get webhook", Tags: tags, Errors: []int{http.StatusNotFound},
	}, s.getWebhook)
	register(s, huma.Operation{
		OperationID: "rotate-webhook-secret", Method: http.MethodPost, Path: "/api/v1/webhooks/{id}/secret/rotate",
		Summary: "Rotate signing secret", Tags: tags,
		Description: fmt.Sprintf("Replaces the signing secret. The replaced secret keeps signing beside the new one for expire_previous_in_seconds "+
			"(webhook-signature carries one v1 signature per unexpired secret, newest first; X-Service-Signature is keyed with the oldest). "+
			"0 ends every overlap at once. At most %d unexpired previous secrets (409 %s). A secret this server cannot decrypt cannot be kept (409 conflict): "+
			"rotate it with 0.", MaxPreviousSecrets, CodeTooManySecrets),
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadRequest},
	}, s.rotateWebhookSecret)
	register(s, huma.Operation{
		OperationID: "update-webhook", Method: http.MethodPatch, Path: "/api/v1/webhooks/{id}",
		Summary: "Update webhook", Tags: tags,
		Description: "Changes any of url, event_types and status. Disabling emits webhook.disabled to the organization's other webhooks that subscribe to it.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusBadRequest},
	}, s.updateWebhook)
	register(s, huma.Operation{
		OperationID: "delete-webhook", Method: http.MethodDelete, Path: "/api/v1/webhooks/{id}",
		Summary: "Delete webhook", Tags: tags, Errors: []int{http.StatusNotFound},
		Description: "Deletes the webhook; its pending deliveries stop and are marked failed.",
	}, s.deleteWebhook)
	register(s, huma.Operation{
		OperationID: "get-webhook-secret", Method: http.MethodGet, Path: "/api/v1/webhooks/{id}/secret",
		Summary: "Get signing secret", Tags: tags, Errors: []int{http.StatusNotFound, http.StatusConflict},
		Description: "Shows the webhook's current signing secret. A secret this server cannot decrypt (MAILYARD_ENCRYPTION_KEY changed) is 409 conflict: " +
			"restore the key, or rotate the secret with expire_previous_in_seconds 0.",
	}, s.getWebhookSecret)
	s.registerWebhookDeliveries()
	s.registerWebhookRecovery()
}

func (s *Server) webhookPolicy() webhook.Policy {
	return webhook.Policy{AllowHTTP: s.cfg.WebhookAllowHTTP, AllowPrivateNetworks: s.cfg.WebhookAllowPrivateNetworks}
}

func (s *Server) createWebhook(ctx context.Context, in *CreateWebhookInput) (*Response[CreateWebhookData], error) {
	if err := webhook.ValidateURL(in.Body.URL, s.webhookPolicy()); err != nil {
		return nil, fieldError("body.url", err.Error())
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	box, err := s.secretBox()
	if err != nil {
		return nil, err
	}
	w := &store.Webhook{OrganizationID: principalFrom(ctx).OrganizationID, URL: in.Body.URL, EventTypes: eventtype.Strings(in.Body.EventTypes)}
	answer := func() *Response[CreateWebhookData] {
		return respond(CreateWebhookData{Webhook: webhookFromStore(w), SigningSecret: secret})
	}
	// With an Idempotency-Key the answer commits with the webhook.
	txCtx := s.answerInTx(ctx, http.StatusCreated, func() any { return answer().Body })
	err = s.store.CreateWebhook(txCtx, w, MaxWebhooksPerOrganization, func(id int64) ([]byte, error) {
		return box.Seal([]byte(secret), store.WebhookSecretBinding(id))
	})
	if err != nil {
		return nil, err
	}
	return answer(), nil
}

func (s *Server) listWebhooks(ctx context.Context, in *ListWebhooksInput) (*Response[WebhookList], error) {
	const list = "webhooks"
	page, err := storePage[int64](in.PageQuery, list, 0, nil)
	if err != nil {
		return nil, err
	}
	rows, more, err := s.store.ListWebhooks(ctx, principalFrom(ctx).OrganizationID, page)
	if err != nil {
		return nil, err
	}
	out := WebhookList{Webhooks: make([]Webhook, 0, len(rows))}
	for i := range rows {
		out.Webhooks = append(out.Webhooks, webhookFromStore(&rows[i]))
	}
	out.PageInfo, err = pageInfo(page, list, rows, more, func(w *store.Webhook) int64 { return w.ID })
	return respond(out), err
}

// ownWebhook reads a webhook of the caller's organization; any other id is
// 404 (the store's "webhook not found"), never 403.
func (s *Server) ownWebhook(ctx context.Context, id int64) (*store.Webhook, error) {
	return s.store.WebhookInOrganization(ctx, principalFrom(ctx).OrganizationID, id)
}

func (s *Server) getWebhook(ctx context.Context, in *WebhookIDInput) (*Response[WebhookData], error) {
	w, err := s.ownWebhook(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	return respond(WebhookData{Webhook: webhookFromStore(w)}), nil
}

func (s *Server) deleteWebhook(ctx context.Context, in *WebhookIDInput) (*Response[WebhookData], error) {
	w, stopped, err := s.store.DeleteWebhook(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	s.deliveries.CancelInBackground(stopped)
	return respond(WebhookData{Webhook: webhookFromStore(w)}), nil
}

// errSecretUnreadable answers a signing secret this server cannot decrypt
// (MAILYARD_ENCRYPTION_KEY changed): the operator's state to mend, not this
// server's fault (docs/webhooks.md). It cannot be shown, nor kept signing
// beside a new one.
var errSecretUnreadable = apperr.Errorf(apperr.Conflict, "webhook",
	"the signing secret cannot be decrypted with this server's MAILYARD_ENCRYPTION_KEY, so it can neither be shown nor keep signing; "+
		"restore the key, or rotate the secret with expire_previous_in_seconds 0")

func (s *Server) getWebhookSecret(ctx context.Context, in *WebhookIDInput) (*Response[SigningSecretData], error) {
	w, err := s.ownWebhook(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	box, err := s.secretBox()
	if err != nil {
		return nil, err
	}
	secret, err := box.Open(w.SecretEnc, store.WebhookSecretBinding(w.ID))
	if errors.Is(err, secrets.ErrDecrypt) {
		return nil, errSecretUnreadable
	}
	if err != nil {
		return nil, fmt.Errorf("open signing secret of webhook %d: %w", w.ID, err)
	}
	return respond(SigningSecretData{WebhookID: w.ID, SigningSecret: string(secret)}), nil
}

func (s *Server) updateWebhook(ctx context.Context, in *UpdateWebhookInput) (*Response[WebhookData], error) {
	b := in.Body
	if b.URL != nil {
		if err := webhook.ValidateURL(*b.URL, s.webhookPolicy()); err != nil {
			return nil, fieldError("body.url", err.Error())
		}
	}
	patch := store.WebhookPatch{URL: b.URL, Status: b.Status}
	if b.EventTypes != nil {
		patch.EventTypes = eventtype.Strings(b.EventTypes)
	}
	var announce []string
	w, stopped, disabled, err := s.store.UpdateWebhook(ctx, principalFrom(ctx).OrganizationID, in.ID, patch, s.platform.StageDisable(&announce))
	if err != nil {
		return nil, err
	}
	s.deliveries.CancelInBackground(stopped)
	if !disabled && w.Status == store.WebhookDisabled && b.Status != nil && *b.Status == store.WebhookDisabled {
		// Disabled already: asking again re-announces the latest disable,
		// which starts only what an earlier failure left unstarted.
		if w.DisableCount > 0 {
			err = s.platform.Emit(ctx, platformevents.WebhookDisabled(w))
		}
	} else {
		err = s.platform.Start(ctx, announce)
	}
	if err != nil {
		s.logger.WarnContext(ctx, "webhook.disabled stored but not scheduled", "request_id", RequestID(ctx), "webhook_id", w.ID, "error", err)
		return nil, apperr.Errorf(apperr.Unavailable, "webhook",
			"the webhook is disabled, but its webhook.disabled event could not be scheduled; send the same request again")
	}
	return respond(WebhookData{Webhook: webhookFromStore(w)}), nil
}

func (s *Server) rotateWebhookSecret(ctx context.Context, in *RotateSecretInput) (*Response[RotatedSecretData], error) {
	expireIn := 86400
	if in.Body != nil && in.Body.ExpirePreviousInSeconds != nil {
		expireIn = *in.Body.ExpirePreviousInSeconds
	}
	box, err := s.secretBox()
	if err != nil {
		return nil, err
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	expires, err := s.store.RotateWebhookSecret(ctx, principalFrom(ctx).OrganizationID, in.ID, store.Rotation{
		ExpireIn:    time.Duration(expireIn) * time.Second,
		MaxPrevious: MaxPreviousSecrets,
		Reseal: func(currentEnc []byte, prevID int64) ([]byte, error) {
			current, err := box.Open(currentEnc, store.WebhookSecretBinding(in.ID))
			if errors.Is(err, secrets.ErrDecrypt) {
				// Nothing to keep; replacing it at once works.
				return nil, errSecretUnreadable
			}
			if err != nil {
				return nil, fmt.Errorf("open signing secret of webhook %d: %w", in.ID, err)
			}
			return box.Seal(current, store.PreviousSecretBinding(prevID))
		},
		SealNew: func(id int64) ([]byte, error) { return box.Seal([]byte(secret), store.WebhookSecretBinding(id)) },
	})
	if err != nil {
		return nil, err
	}
	return respond(RotatedSecretData{SigningSecret: secret, PreviousSecretExpiresAt: expires.UTC()}), nil
}
