package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/domainname"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/webhook"
)

// IngestEventInput is an email event from the sending pipeline.
type IngestEventInput struct {
	Body struct {
		EventID   string              `json:"event_id" minLength:"1" maxLength:"200" doc:"The pipeline's id of the event; a repeat is answered like the first time and creates nothing. Ids starting with mailyard: are Mailyard's own." example:"evt_01JD6Q"`
		Domain    string              `json:"domain" minLength:"1" maxLength:"253" doc:"The sending domain; it must be verified." example:"example.com"`
		EventType eventtype.EmailType `json:"event_type" doc:"An email event; platform events are emitted by Mailyard itself."`
		Timestamp time.Time           `json:"timestamp" doc:"When the event happened, RFC 3339."`
		MessageID string              `json:"message_id" maxLength:"998"`
		ToEmail   string              `json:"to_email" maxLength:"320"`
		Subject   string              `json:"subject" maxLength:"998"`
		URL       string              `json:"url,omitempty" maxLength:"2048" doc:"clicked only: the link the recipient followed."`
		UserAgent string              `json:"user_agent,omitempty" maxLength:"512" doc:"opened and clicked only: the recipient's user agent."`
	}
}

// IngestEventData lists the deliveries the event fans out to.
type IngestEventData struct {
	EventID     string   `json:"event_id"`
	DeliveryIDs []string `json:"delivery_ids" doc:"One per enabled webhook that subscribes to the event type."`
}

// IngestEventResponse answers 202: the deliveries are stored and scheduled.
type IngestEventResponse = Response[IngestEventData]

// InternalHandler is the internal listener's handler: event ingest, with the
// same envelope and error model as the public API and its own bearer token,
// MAILYARD_INTERNAL_TOKEN, and the process's Prometheus metrics at GET
// /metrics. Call it once per listener.
//
// /metrics needs no token: the listener is internal (deploy/README.md), the
// metrics hold no ids, addresses or names, and scrapers are configured far
// more easily without one.
func (s *Server) InternalHandler() http.Handler {
	mux := http.NewServeMux()
	// Outside withMetrics: scrapes are not API traffic.
	outer := http.NewServeMux()
	outer.Handle("GET /metrics", metrics.Handler())
	cfg := humaConfig("Mailyard internal", "Event ingest from the sending pipeline.", "MAILYARD_INTERNAL_TOKEN")
	cfg.DocsPath = ""
	cfg.OpenAPIPath = "/internal/openapi"
	internal := humago.New(mux, cfg)
	internal.UseMiddleware(recordOperation, s.requireInternalToken(internal))
	huma.Register(internal, huma.Operation{
		OperationID: "ingest-event", Method: http.MethodPost, Path: "/internal/v1/events", DefaultStatus: http.StatusAccepted,
		Summary:      "Ingest email event",
		Description:  "Stores the event and fans it out to one delivery per enabled webhook of the domain's organizations that subscribes to its type. A new event counts once in each organization's statistics (on the UTC day of its timestamp); complained also puts to_email on each organization's suppression list, and unsubscribed puts it there with reason unsubscribe. Idempotent on event_id: a repeat counts nothing; another event under a used event_id is 422. 503 means the deliveries are stored but not all could be scheduled: send the same event again.",
		Security:     []map[string][]string{{bearerScheme: {}}},
		MaxBodyBytes: maxBodyBytes + 1,
		Errors: []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusRequestEntityTooLarge,
			http.StatusUnprocessableEntity, http.StatusInternalServerError, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *IngestEventInput) (*IngestEventResponse, error) {
		out, err := s.ingestEvent(ctx, in)
		return out, convertError(ctx, err)
	})
	outer.Handle("/", withMetrics(withRequestID(s.logger, withEnvelopedFallbacks(mux))))
	return outer
}

// requireInternalToken is the internal API's authentication: one shared token,
// compared in constant time. An unset token admits no one.
func (s *Server) requireInternalToken(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		if op := ctx.Operation(); op == nil || len(op.Security) == 0 {
			next(ctx)
			return
		}
		token, ok := bearerToken(ctx.Header("Authorization"))
		want := s.cfg.InternalToken
		if !ok || want == "" || subtle.ConstantTimeCompare([]byte(token), []byte(want)) != 1 {
			writeMiddlewareError(api, ctx, unauthorizedError("missing or wrong internal token in the Authorization header"))
			return
		}
		next(ctx)
	}
}

// errEventIDReused answers another event under a used event_id.
func errEventIDReused(eventID string) error {
	return fieldError("body.event_id", "event_id "+eventID+" was already used for another event (another domain, type, message_id or to_email); a repeat must be the same event")
}

func (s *Server) ingestEvent(ctx context.Context, in *IngestEventInput) (*IngestEventResponse, error) {
	b := in.Body
	// First, since even the look-up of an event sent again reads event_id:
	// the store cannot take a NUL (Bun refuses one in a string). Other
	// control characters are kept as the pipeline sent them.
	var problems []ErrorDetail
	for _, f := range []struct{ name, value string }{
		{"event_id", b.EventID}, {"message_id", b.MessageID}, {"to_email", b.ToEmail}, {"subject", b.Subject},
		{"url", b.URL}, {"user_agent", b.UserAgent},
	} {
		if hasNUL(f.value) {
			problems = append(problems, ErrorDetail{Location: "body." + f.name, Message: f.name + " must not contain a NUL character"})
		}
	}
	// Mailyard's own outcome events have ids "mailyard:<email_id>:<n>": one
	// taken by the pipeline first would leave the platform's own outcome
	// of that recipient without its event, webhook and count.
	if store.IsOwnEventID(b.EventID) {
		problems = append(problems, ErrorDetail{Location: "body.event_id", Message: "event ids starting with mailyard: are Mailyard's own"})
	}
	// The data of each event type is the catalogue's (docs/webhooks.md).
	eventType := eventtype.Type(b.EventType)
	if b.URL != "" && eventType != eventtype.Clicked {
		problems = append(problems, ErrorDetail{Location: "body.url", Message: "only a clicked event has a url"})
	}
	if b.UserAgent != "" && eventType != eventtype.Clicked && eventType != eventtype.Opened {
		problems = append(problems, ErrorDetail{Location: "body.user_agent", Message: "only an opened or clicked event has a user_agent"})
	}
	if len(problems) > 0 {
		return nil, newError(CodeValidationFailed, "validation failed", problems...)
	}
	domain, err := domainname.Normalize(b.Domain)
	if err != nil {
		return nil, fieldError("body.domain", err.Error())
	}
	owners, err := s.store.VerifiedDomainOrganizations(ctx, domain)
	if err != nil {
		return nil, err
	}
	ev := &store.Event{
		EventID: b.EventID, Domain: domain, EventType: string(b.EventType), OccurredAt: b.Timestamp.UTC(),
		MessageID: b.MessageID, ToEmail: b.ToEmail, Subject: b.Subject,
	}
	if len(owners) == 0 {
		// An event sent again after a 503 gets its deliveries started even
		// if its domain stopped being verified meanwhile: they were
		// accepted when it was.
		deliveries, found, err := s.store.IngestedEventDeliveries(ctx, ev)
		if errors.Is(err, store.ErrEventIDReused) {
			return nil, errEventIDReused(b.EventID)
		}
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fieldError("body.domain", "no organization has "+domain+" as a verified sending domain")
		}
		return s.startIngested(ctx, b.EventID, deliveries)
	}
	// Built once: every delivery and every retry sends these bytes.
	body, err := webhook.BuildEnvelope(string(b.EventType), b.Timestamp,
		webhook.EmailEventData{MessageID: b.MessageID, ToEmail: b.ToEmail, Subject: b.Subject, URL: b.URL, UserAgent: b.UserAgent})
	if errors.Is(err, webhook.ErrTimestampOutOfRange) {
		return nil, fieldError("body.timestamp", err.Error())
	}
	if err != nil {
		return nil, err
	}
	deliveries, _, err := s.store.IngestEvent(ctx, ev, owners, body, deliveryruns.NewDeliveryID)
	if errors.Is(err, store.ErrEventIDReused) {
		return nil, errEventIDReused(b.EventID)
	}
	if err != nil {
		return nil, err
	}
	return s.startIngested(ctx, b.EventID, deliveries)
}

// startIngested starts the workflows of an ingested event's deliveries that
// have none yet, and answers with their ids.
func (s *Server) startIngested(ctx context.Context, eventID string, deliveries []store.Delivery) (*IngestEventResponse, error) {
	if err := s.deliveries.StartFirstOf(ctx, deliveries); err != nil {
		s.logger.WarnContext(ctx, "deliveries stored but not scheduled", "request_id", RequestID(ctx), "event_id", eventID, "error", err)
		return nil, apperr.Errorf(apperr.Unavailable, "delivery",
			"the deliveries are stored but could not all be scheduled; send the same event again")
	}
	out := IngestEventData{EventID: eventID, DeliveryIDs: make([]string, 0, len(deliveries))}
	for _, d := range deliveries {
		out.DeliveryIDs = append(out.DeliveryIDs, d.ID)
	}
	return respond(out), nil
}
