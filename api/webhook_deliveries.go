package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// Delivery is one event on its way to one webhook, with its attempts.
type Delivery struct {
	ID         string         `json:"id" format:"uuid" doc:"Sent as X-Service-Delivery-Id and webhook-id on every attempt."`
	WebhookID  int64          `json:"webhook_id"`
	EventType  eventtype.Type `json:"event_type"`
	Test       bool           `json:"test" doc:"Sent by Send test event rather than by an email event."`
	Status     string         `json:"status" enum:"pending,delivered,failed"`
	CreatedAt  time.Time      `json:"created_at"`
	FinishedAt *time.Time     `json:"finished_at" nullable:"true"`
	Attempts   []Attempt      `json:"attempts" doc:"The latest attempts, oldest first: at most 24 (three series of the schedule)."`
	// AttemptCount tells a client that attempts left the older ones out.
	AttemptCount int `json:"attempt_count" doc:"How many attempts were made in all, across every retry and recovery."`
}

// shownAttempts is how many of a delivery's attempts its log shows: three
// series of the schedule. Each retry or recovery adds a series, so the list
// of deliveries would otherwise grow without bound (docs/webhooks.md).
const shownAttempts = 24

// Attempt is one POST of a delivery.
type Attempt struct {
	AttemptedAt       time.Time `json:"attempted_at"`
	StatusCode        *int      `json:"status_code" nullable:"true" doc:"HTTP status, or null when no response arrived."`
	Error             *string   `json:"error" nullable:"true" doc:"Why no response arrived (timeout, TLS, refused destination...)."`
	DurationMS        int64     `json:"duration_ms"`
	ResponseBody      string    `json:"response_body" doc:"The first 4 KiB of the response, after decompression."`
	ResponseTruncated bool      `json:"response_truncated"`
}

func deliveryFromStore(d *store.Delivery, attempts store.AttemptLog) Delivery {
	out := Delivery{
		ID: d.ID, WebhookID: d.WebhookID, EventType: eventtype.Type(d.EventType), Test: d.EventID == nil && d.PlatformEventID == nil,
		Status: d.Status, CreatedAt: d.CreatedAt.UTC(), FinishedAt: utc(d.FinishedAt), Attempts: []Attempt{},
		AttemptCount: attempts.Total,
	}
	for _, a := range attempts.Latest {
		out.Attempts = append(out.Attempts, Attempt{
			AttemptedAt: a.AttemptedAt.UTC(), StatusCode: a.StatusCode, Error: a.Error, DurationMS: a.DurationMS,
			// Receivers answer in any encoding; the log is JSON text.
			ResponseBody: strings.ToValidUTF8(string(a.ResponseBody), "\uFFFD"), ResponseTruncated: a.ResponseTruncated,
		})
	}
	return out
}

// DeliveryData wraps one delivery.
type DeliveryData struct {
	Delivery Delivery `json:"delivery"`
}

// DeliveryPage is the data of List deliveries.
type DeliveryPage struct {
	Deliveries []Delivery `json:"deliveries"`
	PageInfo
}

// TestWebhookInput optionally chooses the sample event's type.
type TestWebhookInput struct {
	ID   int64 `path:"id" doc:"Webhook id."`
	Body *struct {
		EventType eventtype.EmailType `json:"event_type,omitempty" default:"delivered" doc:"The sample is an email event."`
	}
}

// ListDeliveriesInput pages through a webhook's deliveries.
type ListDeliveriesInput struct {
	ID int64 `path:"id" doc:"Webhook id."`
	PageQuery
}

// RetryDeliveryInput names a delivery of a webhook.
type RetryDeliveryInput struct {
	ID         int64  `path:"id" doc:"Webhook id."`
	DeliveryID string `path:"delivery_id" doc:"Delivery id."`
}

func (s *Server) registerWebhookDeliveries() {
	tags := []string{"Webhooks"}
	register(s, huma.Operation{
		OperationID: "test-webhook", Method: http.MethodPost, Path: "/api/v1/webhooks/{id}/test", DefaultStatus: http.StatusCreated,
		Summary: "Send test event", Tags: tags,
		Description: "Sends a sample event of the chosen type (default delivered) through the normal delivery path and answers with the new delivery.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, s.testWebhook)
	register(s, huma.Operation{
		OperationID: "list-webhook-deliveries", Method: http.MethodGet, Path: "/api/v1/webhooks/{id}/deliveries",
		Summary: "List deliveries", Tags: tags,
		Description: "The webhook's deliveries, newest first, each with its attempts; pages of limit (default 20) with cursor.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.listDeliveries)
	register(s, huma.Operation{
		OperationID: "retry-webhook-delivery", Method: http.MethodPost, Path: "/api/v1/webhooks/{id}/deliveries/{delivery_id}/retry",
		Summary: "Retry delivery", Tags: tags,
		Description: "Starts a new attempt series for the delivery, with the same id and body, whenever its log says delivered or failed. 409 while it says pending and its series runs.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict},
	}, s.retryDelivery)
}

// errSeriesRunning answers a retry while the previous series still runs.
var errSeriesRunning = apperr.Errorf(apperr.Conflict, "delivery", "this delivery is still being attempted; retry it once its current attempts have finished")

// errWebhookDisabled refuses to send to a disabled webhook.
var errWebhookDisabled = apperr.Errorf(apperr.Conflict, "webhook", "this webhook is disabled (see its disabled_reason); enable it with PATCH /api/v1/webhooks/{id} and status enabled")

// sampleEvent is what a test delivery carries: recognisable, no one's
// personal data, and every field the event type has, so that a receiver
// can be tested on the real shape.
func sampleEvent(eventType string, at time.Time) ([]byte, error) {
	data := webhook.EmailEventData{MessageID: uuid.NewString(), ToEmail: "recipient@example.com", Subject: "Mailyard test event"}
	switch eventtype.Type(eventType) {
	case eventtype.Clicked:
		data.URL = "https://example.com/"
		fallthrough
	case eventtype.Opened:
		data.UserAgent = "Mozilla/5.0 (Mailyard test event)"
	}
	return webhook.BuildEnvelope(eventType, at, data)
}

func (s *Server) testWebhook(ctx context.Context, in *TestWebhookInput) (*Response[DeliveryData], error) {
	w, err := s.ownWebhook(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if w.Status != store.WebhookEnabled {
		return nil, errWebhookDisabled
	}
	eventType := string(eventtype.Delivered)
	if in.Body != nil && in.Body.EventType != "" {
		eventType = string(in.Body.EventType)
	}
	id, err := deliveryruns.NewDeliveryID()
	if err != nil {
		return nil, err
	}
	body, err := sampleEvent(eventType, time.Now())
	if err != nil {
		return nil, err
	}
	d := &store.Delivery{ID: id, OrganizationID: w.OrganizationID, WebhookID: w.ID, EventType: eventType, Body: body}
	if err := s.store.CreateDelivery(ctx, d); err != nil {
		return nil, err
	}
	// Nothing was sent if the series could not start: the delivery is taken
	// back, so that the client's retry is the test event, not a second one
	// beside a pending delivery that nothing starts. But a start whose
	// answer only was lost (a time-out) has a series, which may be sending
	// the event now: that delivery is answered, as it would have been.
	answer := respond(DeliveryData{Delivery: deliveryFromStore(d, store.AttemptLog{})})
	if err := s.deliveries.StartFirst(ctx, []string{id}); err != nil {
		undo := context.WithoutCancel(ctx)
		if exists, _, rerr := temporalclient.RunOf(undo, s.temporal, delivery.WorkflowID(id)); rerr == nil && exists {
			return answer, nil
		}
		deleted, derr := s.store.DeleteUnattemptedDelivery(undo, id)
		switch {
		case derr != nil:
			s.logger.ErrorContext(ctx, "removing a test delivery whose series did not start", "delivery_id", id, "error", derr)
		case !deleted:
			return answer, nil // attempted: its series did start
		}
		return nil, err
	}
	return answer, nil
}

func (s *Server) listDeliveries(ctx context.Context, in *ListDeliveriesInput) (*Response[DeliveryPage], error) {
	w, err := s.ownWebhook(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	// A cursor names its webhook: one of another webhook's list is refused.
	list := fmt.Sprintf("webhooks/%d/deliveries", w.ID)
	p, err := storePage(in.PageQuery, list, defaultPageSize, canonicalUUID)
	if err != nil {
		return nil, err
	}
	rows, more, err := s.store.ListDeliveries(ctx, w.ID, p)
	if err != nil {
		return nil, err
	}
	page := DeliveryPage{Deliveries: []Delivery{}}
	if page.PageInfo, err = pageInfo(p, list, rows, more, func(d *store.Delivery) string { return d.ID }); err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	attempts, err := s.store.AttemptsOf(ctx, ids, shownAttempts)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		page.Deliveries = append(page.Deliveries, deliveryFromStore(&rows[i], attempts[rows[i].ID]))
	}
	return respond(page), nil
}

func (s *Server) retryDelivery(ctx context.Context, in *RetryDeliveryInput) (*Response[DeliveryData], error) {
	w, err := s.ownWebhook(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	id, ok := canonicalUUID(in.DeliveryID)
	if !ok {
		// No delivery has an id that is not a UUID: answer like a missing one.
		return nil, apperr.NotFoundf("delivery")
	}
	d, err := s.store.DeliveryOfWebhook(ctx, w.ID, id)
	if err != nil {
		return nil, err
	}
	if w.Status != store.WebhookEnabled {
		return nil, errWebhookDisabled
	}
	// The log decides: a final delivery is reopened (pending first: the new
	// series' first attempt sends only to a pending delivery) and gets a new
	// series; a pending one gets a series only if none runs (its first start
	// failed), else 409.
	reopened, series, err := s.store.ReopenDelivery(ctx, d.ID)
	if err != nil {
		return nil, err
	}
	if reopened {
		err = s.deliveries.StartAgain(ctx, d.ID, series)
	} else {
		err = s.deliveries.StartIfIdle(ctx, d.ID, series)
	}
	if errors.Is(err, deliveryruns.ErrSeriesRunning) {
		return nil, errSeriesRunning
	}
	if err != nil {
		return nil, err
	}
	d.Status, d.FinishedAt = store.DeliveryPending, nil
	attempts, err := s.store.AttemptsOf(ctx, []string{d.ID}, shownAttempts)
	if err != nil {
		return nil, err
	}
	return respond(DeliveryData{Delivery: deliveryFromStore(d, attempts[d.ID])}), nil
}
