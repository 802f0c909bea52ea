package webhook

import "time"

// Verdict is what an attempt means for the delivery.
type Verdict int

const (
	// Retryable: the attempt failed and the schedule goes on. This covers
	// every status other than 2xx and 410 (redirects included, as they are
	// not followed), timeouts, connection and TLS errors and refused
	// destinations.
	Retryable Verdict = iota
	// Success: the receiver answered 2xx.
	Success
	// Gone: the receiver answered 410; deliveries stop and the webhook is
	// disabled.
	Gone
)

func (v Verdict) String() string {
	switch v {
	case Success:
		return "success"
	case Gone:
		return "gone"
	default:
		return "retryable"
	}
}

// Outcome describes one attempt as it is recorded and shown to the
// customer.
type Outcome struct {
	Verdict Verdict
	// StatusCode is the HTTP status, or 0 when no response arrived.
	StatusCode int
	// Error explains a failed attempt without a response, or is empty. It
	// never contains the signing secret or the URL.
	Error string
	// Duration runs from sending the request to the end of reading the
	// kept part of the response.
	Duration time.Duration
	// ResponseBody is the start of the response body after decompression,
	// at most ResponseBodyLimit bytes.
	ResponseBody []byte
	// ResponseTruncated reports that the body was longer than what was
	// kept.
	ResponseTruncated bool
	// RetryAfter is the wait a 429 or 503 response asked for with
	// Retry-After, or 0. Clamping it to the schedule is the caller's job.
	RetryAfter time.Duration
}

func verdictFor(status int) Verdict {
	switch {
	case status >= 200 && status <= 299:
		return Success
	case status == 410:
		return Gone
	default:
		return Retryable
	}
}
