package webhook

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mailyard/mailyard/internal/egress"
	"github.com/mailyard/mailyard/internal/textclean"
)

// UserAgent identifies delivery requests to receivers.
const UserAgent = "Mailyard-Webhooks/1"

// Delivery is one event on its way to one webhook.
type Delivery struct {
	// URL is the webhook's URL.
	URL string
	// Secret is the webhook's signing secret ("whsec_...").
	Secret string
	// PreviousSecrets are the secrets a rotation replaced that have not
	// expired yet, newest first. While there are some, webhook-signature
	// carries one signature per secret (Secret's first) and
	// X-Service-Signature is keyed with the oldest, so a receiver that checks
	// only that header switches secrets when the overlap ends.
	PreviousSecrets []string
	// ID identifies the delivery; it is the same on every retry and is
	// sent as X-Service-Delivery-Id and webhook-id.
	ID string
	// EventType is sent as X-Service-Event.
	EventType string
	// Body is sent and signed byte for byte (see BuildBody).
	Body []byte
	// AttemptTime is sent as webhook-timestamp and signed. It is the time
	// of this attempt, not of the event, so that receivers enforcing the
	// Standard Webhooks replay window accept late retries. Zero means now.
	AttemptTime time.Time
}

// Send makes one delivery attempt with a client from NewClient and reports
// what happened. It never returns an error: every failure is an Outcome.
func Send(ctx context.Context, client *http.Client, d Delivery) Outcome {
	start := time.Now()
	ts := d.AttemptTime
	if ts.IsZero() {
		ts = start
	}
	req, err := newDeliveryRequest(ctx, d, ts)
	if err != nil {
		return failed(err.Error(), start)
	}
	resp, err := client.Do(req)
	if err != nil {
		return failed(describeError(err, client.Timeout), start)
	}
	defer resp.Body.Close()
	body, truncated := readResponseBody(resp)
	return Outcome{
		Verdict:           verdictFor(resp.StatusCode),
		StatusCode:        resp.StatusCode,
		Duration:          time.Since(start),
		ResponseBody:      body,
		ResponseTruncated: truncated,
		RetryAfter:        retryAfter(resp, time.Now()),
	}
}

// newDeliveryRequest builds the POST and signs it over the exact body bytes
// it carries.
func newDeliveryRequest(ctx context.Context, d Delivery, ts time.Time) (*http.Request, error) {
	secrets := append([]string{d.Secret}, d.PreviousSecrets...)
	standardSigs := make([]string, len(secrets))
	for i, secret := range secrets {
		sig, err := SignStandard(secret, d.ID, ts, d.Body)
		if err != nil {
			return nil, err
		}
		standardSigs[i] = sig
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return nil, errors.New("webhook URL is not a valid URL")
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", UserAgent)
	// Advertised because readResponseBody inflates gzip with a limit.
	h.Set("Accept-Encoding", "gzip")
	h.Set("X-Service-Event", d.EventType)
	h.Set("X-Service-Delivery-Id", d.ID)
	h.Set("X-Service-Signature", SignSeed(secrets[len(secrets)-1], d.Body))
	// Standard Webhooks spells its headers in lower case; direct map
	// assignment keeps that spelling on HTTP/1.1 wires.
	h["webhook-id"] = []string{d.ID}
	h["webhook-timestamp"] = []string{strconv.FormatInt(ts.Unix(), 10)}
	// Standard Webhooks separates several signatures with spaces.
	h["webhook-signature"] = []string{strings.Join(standardSigs, " ")}
	return req, nil
}

// MaxErrorLen bounds Outcome.Error.
const MaxErrorLen = 512

// failed is the Outcome of an attempt that got no response. The error text
// can quote the receiver (a certificate's names, a redirect's location): it
// is cleaned and cut, since a NUL or invalid UTF-8 in it would make the
// attempt unstorable, and the delivery would retry for days.
func failed(text string, start time.Time) Outcome {
	return Outcome{Verdict: Retryable, Error: textclean.Line(text, MaxErrorLen), Duration: time.Since(start)}
}

// describeError turns a client error into text for the delivery log. The
// URL wrapper is dropped: the URL is known from the webhook and may carry
// tokens in its query.
func describeError(err error, timeout time.Duration) string {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	var netErr net.Error
	switch {
	case errors.Is(err, egress.ErrBlockedAddress):
		// Without the address: it is what the host name resolves to
		// inside Mailyard's network, which the log must not map out for
		// whoever chose the URL (an internal service's name, say).
		return "refused to connect: " + egress.ErrBlockedAddress.Error()
	case errors.Is(err, context.Canceled):
		return "attempt canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		if timeout > 0 {
			return "timed out after " + timeout.String()
		}
		return "timed out"
	}
	return egress.Describe(err)
}
