// Package apperr is Mailyard's typed error: an error code the API answers with,
// the kind of resource it is about, and a message a client may read. The store,
// the API and anything else that refuses a request return one; the API maps its
// code to an HTTP status in one table (api/errors.go), so no handler translates
// errors one by one. The README lists every code with its status.
//
// The idea is benbjohnson/wtf's: errors say what went wrong in the application's
// terms, and only the transport knows what that means in HTTP.
package apperr

import (
	"errors"
	"fmt"
)

// The codes. Each one needs a row in api's httpStatusByCode and in the README's
// error table; a test in api checks both.
const (
	BadRequest            = "bad_request"             // the request cannot be read (not JSON, wrong content type)
	Unauthorized          = "unauthorized"            // no valid API key
	Forbidden             = "forbidden"               // the key lacks the permission
	NotFound              = "not_found"               // unknown route (method and path) or id, or an id of another organization
	Conflict              = "conflict"                // the resource's state refuses the operation
	DomainExists          = "domain_exists"           // the domain was already added to the organization
	DomainNotVerified     = "domain_not_verified"     // the operation needs a verified domain
	EmailNotScheduled     = "email_not_scheduled"     // the email is not scheduled, or its sending has begun
	RotationInProgress    = "rotation_in_progress"    // a DKIM rotation of the domain is under way
	WebhookLimitReached   = "webhook_limit_reached"   // the organization has the most webhooks it can have
	TooManySecrets        = "too_many_secrets"        // the webhook has the most unexpired previous secrets
	TrackingNotConfigured = "tracking_not_configured" // tracking needs MAILYARD_TRACKING_URL
	IdempotencyInProgress = "idempotency_in_progress" // a request with this Idempotency-Key is being answered
	IdempotencyKeyReused  = "idempotency_key_reused"  // the Idempotency-Key was used for another request
	PayloadTooLarge       = "payload_too_large"       // the body is too long
	ValidationFailed      = "validation_failed"       // a field, parameter or header is invalid
	RateLimited           = "rate_limited"            // the key is over its rate limit
	Internal              = "internal"                // a bug or an unexpected failure; never carries details
	Unavailable           = "unavailable"             // a dependency is unreachable: retry
)

// Error is a failure a client may be told about. Message is written for the
// client: it never holds SQL, internal ids of other organizations or secrets.
type Error struct {
	Code     string // one of the constants above
	Resource string // what it is about: "domain", "webhook", "credential", "delivery", ...; may be empty
	Message  string
}

// Errorf builds an Error; the message is formatted like fmt.Sprintf.
func Errorf(code, resource, format string, args ...any) *Error {
	return &Error{Code: code, Resource: resource, Message: fmt.Sprintf(format, args...)}
}

// NotFoundf is the not-found error of a resource: "<resource> not found".
func NotFoundf(resource string) *Error {
	return Errorf(NotFound, resource, "%s not found", resource)
}

func (e *Error) Error() string { return e.Message }

// Is compares codes, not messages: errors.Is(err, target) holds when err has
// target's code and, if target names one, its resource. So a sentinel such as
// store.ErrNotFound matches every not-found error of the store, whichever
// resource it names and however its message reads.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Resource == "" || t.Resource == e.Resource)
}

// Code is the code of the first Error in err's chain: "" for nil, Internal for
// an error that carries none.
func Code(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}
