package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/domainname"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/internal/tracktoken"
	"github.com/mailyard/mailyard/internal/verification"
)

// DomainTracking is a domain's tracking settings (docs/tracking.md).
type DomainTracking struct {
	Opens              bool    `json:"opens" doc:"Add an open pixel to the HTML."`
	Clicks             bool    `json:"clicks" doc:"Rewrite the HTML's http(s) links to click-tracking links."`
	Unsubscribe        bool    `json:"unsubscribe" doc:"Add RFC 8058 one-click unsubscribe (List-Unsubscribe) and replace {{unsubscribe_url}}."`
	CustomDomain       *string `json:"custom_domain" nullable:"true" doc:"The custom tracking domain, a subdomain of the domain with a CNAME to the tracking host (record 5)." example:"track.example.com"`
	CustomDomainStatus *string `json:"custom_domain_status" nullable:"true" enum:"pending,verified,mismatch" doc:"The status of the custom domain's record; links use https://<custom_domain> once verified. null without a custom domain."`
}

// EmailTracking overrides the domain's tracking settings for one email.
type EmailTracking struct {
	Opens       *bool `json:"opens,omitempty" doc:"Override the domain's opens setting."`
	Clicks      *bool `json:"clicks,omitempty" doc:"Override the domain's clicks setting."`
	Unsubscribe *bool `json:"unsubscribe,omitempty" doc:"Override the domain's unsubscribe setting."`
}

// OptionalDomainName is a JSON field that may be absent (no change), null
// (remove) or a name (set).
type OptionalDomainName struct {
	Set   bool
	Value *string
}

// UnmarshalJSON runs only for a field that is present.
func (o *OptionalDomainName) UnmarshalJSON(b []byte) error {
	o.Set = true
	return json.Unmarshal(b, &o.Value)
}

// Schema describes the field as a nullable string.
func (o OptionalDomainName) Schema(huma.Registry) *huma.Schema {
	return &huma.Schema{Type: huma.TypeString, Nullable: true, MaxLength: new(300),
		Description: "The custom tracking domain (a subdomain of the domain, e.g. track.example.com); null removes it."}
}

// UpdateTrackingInput is the body of Update tracking settings.
type UpdateTrackingInput struct {
	DomainIDInput
	Body struct {
		Opens        *bool              `json:"opens,omitempty" doc:"Add an open pixel to the HTML."`
		Clicks       *bool              `json:"clicks,omitempty" doc:"Rewrite the HTML's http(s) links to click-tracking links."`
		Unsubscribe  *bool              `json:"unsubscribe,omitempty" doc:"Add one-click unsubscribe."`
		CustomDomain OptionalDomainName `json:"custom_domain,omitempty"`
	}
}

func (s *Server) registerTracking() {
	register(s, huma.Operation{
		OperationID: "update-tracking", Method: http.MethodPatch, Path: "/api/v1/domains/{id}/tracking",
		Summary: "Update tracking settings", Tags: []string{"Domains"},
		Description: "Turns open, click and one-click unsubscribe tracking on or off for the domain's emails (all off by default), and sets or removes (null) its custom tracking domain, " +
			"whose CNAME becomes the domain's record 5 until it is removed; POST /verify checks it with the others. " +
			"Turning tracking on needs MAILYARD_TRACKING_URL, and a custom domain MAILYARD_TRACKING_TLS_ADDR as well (409 tracking_not_configured).",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadRequest},
	}, s.updateTracking)
}

func (s *Server) updateTracking(ctx context.Context, in *UpdateTrackingInput) (*Response[DomainDetailData], error) {
	d, err := s.store.DomainInOrganization(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	b := in.Body
	change := store.TrackingSettings{Opens: b.Opens, Clicks: b.Clicks, Unsubscribe: b.Unsubscribe, CustomDomainSet: b.CustomDomain.Set}
	if v := b.CustomDomain.Value; b.CustomDomain.Set && v != nil {
		name, problem := s.customTrackingDomain(*v, d)
		if problem != "" {
			return nil, newError(CodeValidationFailed, "validation failed", ErrorDetail{Location: "body.custom_domain", Message: problem})
		}
		change.CustomDomain = &name
		change.CustomRecord = &store.DomainRecord{Purpose: "Tracking (CNAME)", Type: verification.TypeCNAME, Name: name, Value: s.cfg.Tracking.Host}
	}
	turnsOn := isTrue(b.Opens) || isTrue(b.Clicks) || isTrue(b.Unsubscribe) || change.CustomDomain != nil
	if turnsOn && s.cfg.Tracking.URL == "" {
		return nil, trackingNotConfigured()
	}
	if change.CustomDomain != nil && s.cfg.Tracking.TLSAddr == "" {
		// Nothing would serve HTTPS for it: every link of its emails would
		// lead nowhere, the one-click unsubscribe included.
		return nil, newError(CodeTrackingNotConfigured, "custom tracking domains need MAILYARD_TRACKING_TLS_ADDR, where mailyard api serves their HTTPS, which this server does not have")
	}
	if err := s.store.SetDomainTracking(ctx, d, change); err != nil {
		return nil, err
	}
	detail, err := s.domainDetail(ctx, d)
	if err != nil {
		return nil, err
	}
	return respond(DomainDetailData{Domain: detail}), nil
}

// customTrackingDomain normalizes a custom tracking domain, or says what is
// wrong with it: it must be a subdomain of the domain, and not the MAIL FROM
// subdomain, whose MX and SPF records a CNAME would shadow.
func (s *Server) customTrackingDomain(v string, d *store.Domain) (string, string) {
	name, err := domainname.NormalizeMailFrom(v, d.Domain)
	if err != nil {
		return "", err.Error()
	}
	if name == d.MailFromSubdomain {
		return "", "the custom tracking domain cannot be the MAIL FROM subdomain " + d.MailFromSubdomain
	}
	return name, ""
}

// domainTracking is the tracking part of a domain's answer.
func (s *Server) domainTracking(ctx context.Context, d *store.Domain) (DomainTracking, error) {
	out := DomainTracking{Opens: d.TrackOpens, Clicks: d.TrackClicks, Unsubscribe: d.TrackUnsubscribe, CustomDomain: d.TrackingDomain}
	if d.TrackingDomain == nil {
		return out, nil
	}
	status, err := s.store.TrackingDomainStatus(ctx, d.ID)
	if err != nil {
		return out, err
	}
	if status != "" {
		out.CustomDomainStatus = &status
	}
	return out, nil
}

// applyTracking decides an email's tracking: the request's own settings
// over its domain's. Tracking on without MAILYARD_TRACKING_URL is refused.
func (s *Server) applyTracking(e *store.Email, t *EmailTracking, d *store.Domain) error {
	pick := func(override *bool, domain bool) bool {
		if override != nil {
			return *override
		}
		return domain
	}
	if t == nil {
		t = &EmailTracking{}
	}
	e.TrackOpens = pick(t.Opens, d.TrackOpens)
	e.TrackClicks = pick(t.Clicks, d.TrackClicks)
	e.TrackUnsubscribe = pick(t.Unsubscribe, d.TrackUnsubscribe)
	if e.Tracked() && s.cfg.Tracking.URL == "" {
		return trackingNotConfigured()
	}
	return nil
}

func trackingNotConfigured() error {
	return newError(CodeTrackingNotConfigured, "tracking needs MAILYARD_TRACKING_URL, which this server does not have")
}

func isTrue(b *bool) bool { return b != nil && *b }

// Sizes of the tracking event queue: writers work it, and a full queue
// makes requests write their own event (tracking.Queue).
const (
	trackingQueueSize = 10000
	trackingWriters   = 4
)

// registerTrackingRoutes serves /t/o, /t/c and /t/u (docs/tracking.md) on
// mux, and on a handler of their own for the custom domains' HTTPS
// listener. They are not operations of the API reference and need no key.
func (s *Server) registerTrackingRoutes(mux *http.ServeMux) {
	keys, err := tracktoken.New(s.cfg.EncryptionKey)
	if err != nil {
		return // New checked the key's length already
	}
	s.trackingQueue = tracking.NewQueue(trackingQueueSize, s.logger)
	routes := &tracking.Routes{
		Keys: keys, Store: s.store, Queue: s.trackingQueue, Hosts: s.cfg.Tracking.Hosts(), Logger: s.logger,
		Recorder: &tracking.Recorder{Store: s.store, Runs: s.deliveries},
	}
	routes.Register(mux)
	own := http.NewServeMux()
	routes.Register(own)
	s.trackingHandler = withMetrics(withRequestID(s.logger, own))
}

// TrackingHandler serves the tracking routes alone: the handler of the
// custom tracking domains' HTTPS listener. nil without an encryption key.
func (s *Server) TrackingHandler() http.Handler { return s.trackingHandler }
