package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/webhook"
)

// MaxWebhooksPerOrganization is the limit of PRODUCT.md §6. Creating one more
// answers 409 webhook_limit_reached: the request is valid, the organization's
// state refuses it until a webhook is deleted.
const MaxWebhooksPerOrganization = 20


// Webhook is a subscription as the API shows it.
type Webhook struct {
	ID         int64            `json:"id" example:"1"`
	URL        string           `json:"url" example:"https://hooks.example.com/mailyard"`
	EventTypes []eventtype.Type `json:"event_types" example:"[\"delivered\",\"bounced\"]"`
	CreatedAt  time.Time        `json:"created_at"`
	Status     string           `json:"status" enum:"enabled,disabled" doc:"disabled: the receiver answered 410 Gone; nothing is sent any more."`
}

func webhookFromStore(w *store.Webhook) Webhook {
	return Webhook{ID: w.ID, URL: w.URL, EventTypes: eventtype.FromStrings(w.EventTypes), CreatedAt: w.CreatedAt.UTC(), Status: w.Status}
}

// CreateWebhookInput is the body of Create webhook.
type CreateWebhookInput struct {
	Body struct {
		URL        string           `json:"url" doc:"https:// URL that receives the events, at most 2048 characters." example:"https://hooks.example.com/mailyard"`
		EventTypes []eventtype.Type `json:"event_types" minItems:"1" uniqueItems:"true" doc:"Events to receive: email events and platform events (domain.*, webhook.disabled)."`
	}
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
		OperationID: "delete-webhook", Method: http.MethodDelete, Path: "/api/v1/webhooks/{id}",
		Summary: "Delete webhook", Tags: tags, Errors: []int{http.StatusNotFound},
		Description: "Deletes the webhook; its pending deliveries stop and are marked failed.",
	}, s.deleteWebhook)
	register(s, huma.Operation{
		OperationID: "get-webhook-secret", Method: http.MethodGet, Path: "/api/v1/webhooks/{id}/secret",
		Summary: "Get signing secret", Tags: tags, Errors: []int{http.StatusNotFound},
	}, s.getWebhookSecret)
	s.registerWebhookDeliveries()
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
	err = s.store.CreateWebhook(ctx, w, MaxWebhooksPerOrganization, func(id int64) ([]byte, error) {
		return box.Seal([]byte(secret), store.WebhookSecretBinding(id))
	})
	if errors.Is(err, store.ErrLimitReached) {
		return nil, NewAPIError(http.StatusConflict, CodeWebhookLimitReached,
			fmt.Sprintf("this organization already has %d webhooks, the most it can have; delete one first", MaxWebhooksPerOrganization))
	}
	if err != nil {
		return nil, err
	}
	return respond(CreateWebhookData{Webhook: webhookFromStore(w), SigningSecret: secret}), nil
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
// 404, never 403.
func (s *Server) ownWebhook(ctx context.Context, id int64) (*store.Webhook, error) {
	w, err := s.store.WebhookInOrganization(ctx, principalFrom(ctx).OrganizationID, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundError("webhook")
	}
	return w, err
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
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFoundError("webhook")
	}
	if err != nil {
		return nil, err
	}
	s.deliveries.CancelInBackground(stopped)
	return respond(WebhookData{Webhook: webhookFromStore(w)}), nil
}

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
	if err != nil {
		return nil, fmt.Errorf("open signing secret of webhook %d: %w", w.ID, err)
	}
	return respond(SigningSecretData{WebhookID: w.ID, SigningSecret: string(secret)}), nil
}
