// Package metrics holds Mailyard's Prometheus metrics: one registry per
// process, the metric definitions, and the Temporal SDK's metrics handler
// (deploy/README.md "Metrics" lists the names and example alerts).
//
// The registry is the process's, not Prometheus' global default one, so a
// scrape shows exactly what this package defines, the Go runtime and process
// collectors, and the Temporal SDK's metrics. `mailyard dev` runs every part in
// one process and so serves every metric from one registry.
//
// Labels are bounded on purpose: operation ids, status codes, outcomes and
// record kinds, never ids, addresses or domain names, so the number of series
// does not grow with customers.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// registry is the process's registry; Handler serves it.
var registry = prometheus.NewRegistry()

// register adds c to the registry and returns it, so definitions read as one
// expression.
func register[C prometheus.Collector](c C) C {
	registry.MustRegister(c)
	return c
}

func init() {
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registry.MustRegister(temporalSDK)
	// Known label values start at zero, so ratios and increase() work
	// before the first event of a kind.
	for _, o := range []string{WebhookSuccess, WebhookGone, WebhookRetryable} {
		webhookAttempts.WithLabelValues(o)
	}
	for _, o := range []string{EmailDelivered, EmailDeferred, EmailBounced} {
		emailRecipients.WithLabelValues(o)
	}
}

// Handler serves the registry in the Prometheus text format (or OpenMetrics
// when the scraper asks for it).
func Handler() http.Handler {
	return promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry})
}

// Gather returns the registry's current values (tests read them).
var Gather = registry.Gather

// latencyBuckets are the bounds (seconds) of the request and attempt
// histograms: from 5 ms API answers to the 15 s limit of a webhook attempt.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30}

var (
	httpRequests = register(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailyard_http_requests_total",
		Help: "HTTP requests answered by the API (public and internal listeners), by Huma operation id (\"other\" for the docs, the OpenAPI document and unknown paths) and status code.",
	}, []string{"operation", "status"}))
	httpDuration = register(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mailyard_http_request_duration_seconds",
		Help:    "Time from receiving an API request to the end of its answer, by Huma operation id.",
		Buckets: latencyBuckets,
	}, []string{"operation"}))
)

// OperationOther labels requests that match no API operation.
const OperationOther = "other"

// ObserveHTTPRequest counts one answered request.
func ObserveHTTPRequest(operation string, status int, d time.Duration) {
	if operation == "" {
		operation = OperationOther
	}
	httpRequests.WithLabelValues(operation, strconv.Itoa(status)).Inc()
	httpDuration.WithLabelValues(operation).Observe(d.Seconds())
}

// Webhook attempt outcomes: the verdict of internal/webhook.
const (
	WebhookSuccess   = "success"   // 2xx
	WebhookGone      = "gone"      // 410: the webhook is disabled
	WebhookRetryable = "retryable" // anything else, timeouts and refused destinations included
)

var (
	webhookAttempts = register(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailyard_webhook_attempts_total",
		Help: "Webhook delivery attempts made, by outcome (success, gone, retryable).",
	}, []string{"outcome"}))
	webhookDuration = register(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mailyard_webhook_attempt_duration_seconds",
		Help:    "Time of one webhook POST, from sending the request to reading the kept part of the answer, by outcome.",
		Buckets: latencyBuckets,
	}, []string{"outcome"}))
)

// ObserveWebhookAttempt counts one attempt with one of the Webhook outcomes.
func ObserveWebhookAttempt(outcome string, d time.Duration) {
	webhookAttempts.WithLabelValues(outcome).Inc()
	webhookDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// Email recipient outcomes of one SMTP attempt (docs/sending.md).
const (
	EmailDelivered = "delivered" // accepted by the receiving server
	EmailDeferred  = "deferred"  // temporary failure; a later attempt retries
	EmailBounced   = "bounced"   // permanent failure, or deferred on the last attempt
)

// smtpBuckets reach the 15-minute limit of one email attempt: a slow server
// answers each command within minutes.
var smtpBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900}

var (
	emailRecipients = register(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailyard_email_recipient_attempts_total",
		Help: "Recipients of SMTP attempts, by outcome (delivered, deferred, bounced).",
	}, []string{"outcome"}))
	emailDuration = register(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mailyard_email_attempt_duration_seconds",
		Help:    "Time of one SMTP attempt of an email, to all its pending recipients.",
		Buckets: smtpBuckets,
	}))
)

// ObserveEmailAttempt records how long one SMTP attempt took.
func ObserveEmailAttempt(d time.Duration) { emailDuration.Observe(d.Seconds()) }

// CountEmailRecipient counts one recipient's answer with one of the Email
// outcomes.
func CountEmailRecipient(outcome string) { emailRecipients.WithLabelValues(outcome).Inc() }

var trackingRequests = register(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mailyard_tracking_requests_total",
	Help: "Requests to the tracking routes, by route (open, click, unsubscribe_page, unsubscribe) and result (ok, invalid, unknown, bad_request).",
}, []string{"route", "result"}))

// CountTrackingRequest counts one request to a tracking route.
func CountTrackingRequest(route, result string) {
	trackingRequests.WithLabelValues(route, result).Inc()
}

var inboundMessages = register(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mailyard_inbound_messages_total",
	Help: "Messages received at the bounce host and handled, by kind (dsn, arf, arf_other, auto_reply, legacy_bounce, unsubscribe, unrecognized).",
}, []string{"kind"}))

// CountInboundMessage counts one handled inbound message.
func CountInboundMessage(kind string) { inboundMessages.WithLabelValues(kind).Inc() }

// StartInboundKinds makes each kind's series exist at zero in a process that
// handles inbound messages, so the unrecognized ratio has a denominator from
// the start.
func StartInboundKinds(kinds []string) {
	for _, k := range kinds {
		inboundMessages.WithLabelValues(k)
	}
}

var verificationChecks = register(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mailyard_verification_checks_total",
	Help: "DNS checks of customers' domain records, by record kind (cname, spf, mx) and result (verified, pending, mismatch, lookup_failed).",
}, []string{"record", "result"}))

// CountVerificationCheck counts one record check.
func CountVerificationCheck(record, result string) {
	verificationChecks.WithLabelValues(record, result).Inc()
}

var dnsQueries = register(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mailyard_dns_queries_total",
	Help: "DNS queries answered by the DKIM zone's server, by query type (\"other\" for rare types) and response code.",
}, []string{"qtype", "rcode"}))

// CountDNSQuery counts one answered query. The caller bounds both labels
// (internal/dnsserver names rare query types "other").
func CountDNSQuery(qtype, rcode string) { dnsQueries.WithLabelValues(qtype, rcode).Inc() }

var dnsLimited = register(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mailyard_dns_responses_limited_total",
	Help: "UDP answers of the DKIM zone's server held back by response rate limiting, by what was sent instead: \"truncated\" (an empty answer telling the client to ask over TCP) or \"dropped\" (nothing).",
}, []string{"action"}))

// CountDNSLimited counts one answer held back by response rate limiting;
// action is "truncated" or "dropped".
func CountDNSLimited(action string) { dnsLimited.WithLabelValues(action).Inc() }

var smtpMessagesLimited = register(prometheus.NewCounter(prometheus.CounterOpts{
	Name: "mailyard_smtp_messages_limited_total",
	Help: "MAIL FROM commands refused because their client address sent more messages than its rate allows (MAILYARD_INBOUND_MESSAGE_RATE).",
}))

// CountSMTPMessageLimited counts one MAIL FROM refused by a client
// address's message rate.
func CountSMTPMessageLimited() { smtpMessagesLimited.Inc() }
