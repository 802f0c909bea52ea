// Package api is Mailyard's HTTP API: Huma operations (one file per resource), the
// success and error envelopes, authentication, and the internal listener.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/api/docsui"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/keyusage"
	"github.com/mailyard/mailyard/internal/periodic"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/ratelimit"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/internal/verification"
)

// maxBodyBytes is the request body limit of the README (64 KiB). Huma answers
// 413 when it reads this many bytes, so the limit it gets is one more.
const maxBodyBytes = 64 << 10

// Deps are what the API needs; the caller owns their lifecycle.
type Deps struct {
	Config   *config.Config
	Store    *store.Store
	Temporal client.Client
	Logger   *slog.Logger
	// Verifier checks domains that have no onboarding run (verified ones).
	Verifier *verification.Verifier
	// DeliverySchedule overrides the webhook retry schedule (tests).
	DeliverySchedule []time.Duration
	// EmailSchedule overrides the email retry schedule (tests).
	EmailSchedule []time.Duration
	// EagerStart starts delivery and email workflows with eager workflow
	// start: set when a worker shares this process and its Temporal client
	// (`mailyard dev`), see deliveryruns.Runs.EagerStart.
	EagerStart bool
	// IdempotencyWait overrides how long a request waits for the answer of the
	// same request still running before 409 idempotency_in_progress (tests).
	IdempotencyWait time.Duration
	// StartTimeout overrides how long a request waits for Temporal to start
	// or update a workflow, 30 s (tests).
	StartTimeout time.Duration
}

// Server holds the public and internal handlers.
type Server struct {
	cfg      *config.Config
	store    *store.Store
	temporal client.Client
	logger   *slog.Logger
	usage    *keyusage.Recorder
	// limits is the per-key rate limiter; nil when MAILYARD_RATE_LIMIT is off.
	limits *ratelimit.Limiter[int64]

	// box seals and opens webhook signing secrets and stored idempotent
	// answers; nil without an encryption key.
	box *secrets.Box

	idempotencyWait time.Duration
	// startTimeout: Deps.StartTimeout, or startEmailTimeout.
	startTimeout time.Duration
	// emailSchedule is the retry schedule new emails start with (nil: the
	// default).
	emailSchedule []time.Duration
	// eagerStart: Deps.EagerStart.
	eagerStart bool

	onboarding *onboardingRuns
	lifecycle  *domainLifecycle
	deliveries *deliveryruns.Runs
	// platform emits webhook.disabled when a webhook is disabled here.
	platform *platformevents.Emitter

	// trackingHandler serves the tracking routes alone (nil without an
	// encryption key); trackingQueue writes their events.
	trackingHandler http.Handler
	trackingQueue   *tracking.Queue

	api     huma.API
	handler http.Handler
}

// New builds the API and registers every operation.
func New(d Deps) *Server {
	installErrorModel(d.Logger)
	s := &Server{cfg: d.Config, store: d.Store, temporal: d.Temporal, logger: d.Logger, usage: keyusage.New(d.Store, d.Logger), limits: ratelimit.New[int64](d.Config.RateLimit)}
	if len(d.Config.EncryptionKey) > 0 {
		// The configuration checked the key's length, the only way New fails.
		s.box, _ = secrets.New(d.Config.EncryptionKey)
	}
	s.idempotencyWait = d.IdempotencyWait
	s.emailSchedule = d.EmailSchedule
	s.eagerStart = d.EagerStart
	if s.idempotencyWait <= 0 {
		s.idempotencyWait = defaultIdempotencyWait
	}
	s.startTimeout = d.StartTimeout
	if s.startTimeout <= 0 {
		s.startTimeout = startEmailTimeout
	}
	s.deliveries = &deliveryruns.Runs{Temporal: d.Temporal, Store: d.Store, Schedule: d.DeliverySchedule, Logger: d.Logger, EagerStart: d.EagerStart}
	s.platform = &platformevents.Emitter{Store: d.Store, Runs: s.deliveries}
	s.lifecycle = &domainLifecycle{temporal: d.Temporal, store: d.Store, retain: d.Config.DKIMRetain, recheckEvery: d.Config.DKIMRecheck}
	s.onboarding = &onboardingRuns{temporal: d.Temporal, store: d.Store, verifier: d.Verifier, schedule: onboardingSchedule(d.Config.VerifySchedule), logger: d.Logger}

	mux := http.NewServeMux()
	s.api = humago.New(mux, humaConfig("Mailyard", "Management API for sending domains, API credentials and webhooks.",
		"An API key: `Authorization: Bearer myk_...`. Each operation's security requirement lists the permissions that admit a key to it; any one suffices."))
	s.api.UseMiddleware(recordOperation, s.authenticate, s.idempotency)
	s.registerHealth()
	s.registerDomains()
	s.registerDomainLifecycle()
	s.registerCredentials()
	s.registerWebhooks()
	s.registerEmails()
	s.registerSuppressions()
	s.registerStats()
	s.registerTracking()
	documentResponseHeaders(s.api.OpenAPI())
	if s.box != nil {
		s.registerTrackingRoutes(mux)
	}
	// The reference UI from the binary (Huma's own /docs loads it from a CDN).
	docsui.Register(mux, docsui.Options{Path: "/docs", Title: "Mailyard API Reference", OpenAPIURL: "/openapi.json"})

	s.handler = withMetrics(withRequestID(d.Logger, withoutBodylessReadDeadlines(withEnvelopedFallbacks(mux))))
	return s
}

// secretBox is the encryption of signing secrets, or an error when the process
// was started without MAILYARD_ENCRYPTION_KEY.
func (s *Server) secretBox() (*secrets.Box, error) {
	if s.box == nil {
		return nil, errors.New("MAILYARD_ENCRYPTION_KEY is not configured")
	}
	return s.box, nil
}

// Handler is the public listener's handler.
func (s *Server) Handler() http.Handler { return s.handler }

// OpenAPI returns the generated document (tests walk it).
func (s *Server) OpenAPI() *huma.OpenAPI { return s.api.OpenAPI() }

// Run does the API's background work (recording key use, deleting expired
// idempotency keys, erasing expired previous signing secrets, finishing emails
// and domains whose workflow never started) until ctx ends. The writers of
// tracking events it starts work until Close.
func (s *Server) Run(ctx context.Context) {
	go s.sweepIdempotencyKeys(ctx)
	go s.sweepUnstarted(ctx)
	go s.erasePreviousSecrets(ctx)
	if s.trackingQueue != nil {
		go s.trackingQueue.Run(trackingWriters)
	}
	s.usage.Run(ctx)
}

// Close writes the tracking events still queued and returns once they are
// written; an event of a later request is written by the request. Call it
// after the listeners serving Handler and TrackingHandler have shut down
// (their last requests queue events) and before closing the store.
func (s *Server) Close() {
	if s.trackingQueue != nil {
		s.trackingQueue.Close()
	}
}

// eraseEvery is how often expired previous signing secrets are erased.
// Deliveries never use an expired one in between: they read only unexpired
// ones.
const eraseEvery = 30 * time.Second

func (s *Server) erasePreviousSecrets(ctx context.Context) {
	// The first pass waits a period too, like the idempotency sweep: a process
	// that just started has nothing urgent to erase (deliveries never use an
	// expired secret).
	periodic.Every(ctx, eraseEvery, eraseEvery, func(ctx context.Context) {
		if _, err := s.store.ErasePreviousSecrets(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("erase expired previous signing secrets", "error", err)
		}
	})
}

// humaConfig is the configuration both listeners share: no $schema links in
// bodies (the envelope is the whole contract), a bearer security scheme, and no
// Huma docs page (it loads its renderer from a CDN; package docsui serves ours).
func humaConfig(title, description, bearerDoc string) huma.Config {
	cfg := huma.DefaultConfig(title, "1.0.0")
	cfg.Info.Description = description
	cfg.CreateHooks = nil
	cfg.DocsPath = ""
	// Relative to where the document is served: every installation has its
	// own host, and the reference at /docs and generated clients resolve it
	// against the URL they fetched the document from.
	cfg.Servers = []*huma.Server{{URL: "/", Description: "This Mailyard installation (the host that serves this document)."}}
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		bearerScheme: {Type: "http", Scheme: "bearer", Description: bearerDoc},
	}
	return cfg
}

// register adds an operation with the conventions every operation shares: the body
// limit, the bearer scheme and the permission it needs, and the error responses.
func register[I, O any](s *Server, op huma.Operation, handler func(context.Context, *I) (*O, error)) {
	if op.MaxBodyBytes == 0 {
		op.MaxBodyBytes = maxBodyBytes + 1
	}
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	if _, public := op.Metadata["public"]; public {
		// Said outright: this operation needs no key.
		op.Security = []map[string][]string{}
	} else {
		// OpenAPI 3.1 lets a bearer requirement list roles: the permissions
		// that admit a key, so the document says which one each operation needs.
		op.Security = []map[string][]string{{bearerScheme: operationPermissions(&op)}}
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden)
	}
	conventionsForOperation(&op, len(op.Security) > 0)
	op.Errors = append(op.Errors, http.StatusInternalServerError, http.StatusServiceUnavailable)
	huma.Register(s.api, op, func(ctx context.Context, in *I) (*O, error) {
		out, err := handler(ctx, in)
		if err != nil {
			return nil, convertError(ctx, err)
		}
		return out, nil
	})
}
