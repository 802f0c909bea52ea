package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"unicode"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/apperr"
)

// Error codes the API answers with, under the names this package has always
// used; the codes themselves live in internal/apperr, their statuses in
// httpStatusByCode.
const (
	CodeBadRequest            = apperr.BadRequest
	CodeUnauthorized          = apperr.Unauthorized
	CodeForbidden             = apperr.Forbidden
	CodeNotFound              = apperr.NotFound
	CodeDomainExists          = apperr.DomainExists
	CodeDomainNotVerified     = apperr.DomainNotVerified
	CodeEmailNotScheduled     = apperr.EmailNotScheduled
	CodeConflict              = apperr.Conflict
	CodeTrackingNotConfigured = apperr.TrackingNotConfigured
	CodeWebhookLimitReached   = apperr.WebhookLimitReached
	CodeIdempotencyInProgress = apperr.IdempotencyInProgress
	CodeRotationInProgress    = apperr.RotationInProgress
	CodeTooManySecrets        = apperr.TooManySecrets
	CodePayloadTooLarge       = apperr.PayloadTooLarge
	CodeValidationFailed      = apperr.ValidationFailed
	CodeIdempotencyKeyReused  = apperr.IdempotencyKeyReused
	CodeRateLimited           = apperr.RateLimited
	CodeInternal              = apperr.Internal
	CodeUnavailable           = apperr.Unavailable
)

// httpStatusByCode is the one table from error codes to HTTP statuses. A handler
// returns an *apperr.Error (the store's, or its own) and convertError answers it
// with its code's status and its message; no handler translates errors itself.
// The HTTP status says the class, the code says which. The README's error table
// lists exactly these codes (TestREADMEListsEveryErrorCode).
var httpStatusByCode = map[string]int{
	apperr.BadRequest:            http.StatusBadRequest,
	apperr.Unauthorized:          http.StatusUnauthorized,
	apperr.Forbidden:             http.StatusForbidden,
	apperr.NotFound:              http.StatusNotFound,
	apperr.Conflict:              http.StatusConflict,
	apperr.DomainExists:          http.StatusConflict,
	apperr.DomainNotVerified:     http.StatusConflict,
	apperr.EmailNotScheduled:     http.StatusConflict,
	apperr.TrackingNotConfigured: http.StatusConflict,
	apperr.RotationInProgress:    http.StatusConflict,
	apperr.WebhookLimitReached:   http.StatusConflict,
	apperr.TooManySecrets:        http.StatusConflict,
	apperr.IdempotencyInProgress: http.StatusConflict,
	apperr.PayloadTooLarge:       http.StatusRequestEntityTooLarge,
	apperr.ValidationFailed:      http.StatusUnprocessableEntity,
	apperr.IdempotencyKeyReused:  http.StatusUnprocessableEntity,
	apperr.RateLimited:           http.StatusTooManyRequests,
	apperr.Internal:              http.StatusInternalServerError,
	apperr.Unavailable:           http.StatusServiceUnavailable,
}

// codeForStatus is the default code of a status, used for errors that Huma itself
// raises (validation, body parsing, size limit) and that carry no code of their own.
// It is httpStatusByCode read backwards (TestCodeForStatusInvertsTheTable), plus
// the few statuses Huma answers that no code of ours has.
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType, http.StatusNotAcceptable, http.StatusRequestTimeout:
		return CodeBadRequest
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	case http.StatusUnprocessableEntity:
		return CodeValidationFailed
	case http.StatusTooManyRequests:
		return CodeRateLimited
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	default:
		return CodeInternal
	}
}

// ErrorResponse is the error envelope, the body of every non-2xx answer:
// {"status":"error","error":{"code":"...","message":"...","details":[...]}}.
type ErrorResponse struct {
	status  int
	headers http.Header

	Status string    `json:"status" enum:"error" doc:"Always \"error\"."`
	Err    ErrorBody `json:"error"`
}

// ErrorBody says what went wrong.
type ErrorBody struct {
	Code    string        `json:"code" doc:"Machine-readable error code." example:"validation_failed"`
	Message string        `json:"message" doc:"Human-readable explanation."`
	Details []ErrorDetail `json:"details,omitempty" doc:"Per-field problems, when there are some."`
}

// ErrorDetail names one problem and where it is.
type ErrorDetail struct {
	Location string `json:"location,omitempty" doc:"Where the problem is, e.g. body.domain." example:"body.domain"`
	Message  string `json:"message" doc:"What is wrong there."`
}

func (e *ErrorResponse) Error() string           { return e.Err.Code + ": " + e.Err.Message }
func (e *ErrorResponse) GetStatus() int          { return e.status }
func (e *ErrorResponse) GetHeaders() http.Header { return e.headers }

// NewAPIError builds an error answer with an explicit status. Only Huma's own
// errors need one (their status comes first); everything else returns an
// *apperr.Error, or uses newError when it must write the answer itself.
func NewAPIError(status int, code, message string, details ...ErrorDetail) *ErrorResponse {
	return &ErrorResponse{status: status, headers: http.Header{}, Status: "error", Err: ErrorBody{Code: code, Message: message, Details: details}}
}

// newError is the answer for code, with the status httpStatusByCode gives it:
// for middleware, which writes answers itself, and for answers with details or
// headers, which an *apperr.Error does not carry.
func newError(code, message string, details ...ErrorDetail) *ErrorResponse {
	status, ok := httpStatusByCode[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	return NewAPIError(status, code, message, details...)
}

// fieldError is a 422 for one field, in the same shape as Huma's own validation errors.
func fieldError(location, message string) *ErrorResponse {
	return newError(CodeValidationFailed, "validation failed", ErrorDetail{Location: location, Message: message})
}

// Text from a request is checked with these before it reaches the store, so
// that what the database cannot take is a 4xx rather than a 500.

// hasNUL reports whether s holds a NUL. Bun refuses a NUL in a string (it
// writes an error marker into the SQL, which PostgreSQL answers with a syntax
// error), and a text column could not hold one anyway.
func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// hasControl reports whether s holds a control character: C0 (NUL
// included), DEL, C1, or a bidirectional control (U+202E and its kind,
// which make text display as other text). A name people read, such as a
// credential's label, has no use for any of them.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) })
}

// canonicalUUID is the canonical form (lower-case, hyphenated) of the UUID
// s, and whether s is one. uuid.Parse also accepts forms that PostgreSQL's
// uuid type refuses (urn:uuid:...), and Temporal names an email's workflow
// by the exact string: every id or cursor key that goes to SQL or Temporal
// is this form.
func canonicalUUID(s string) (string, bool) {
	id, err := uuid.Parse(s)
	if err != nil {
		return "", false
	}
	return id.String(), true
}

// notFoundError is a 404 that is not about a stored resource (an unknown route).
func notFoundError(what string) *ErrorResponse {
	return newError(CodeNotFound, what+" not found")
}

func unauthorizedError(message string) *ErrorResponse {
	e := newError(CodeUnauthorized, message)
	e.headers.Set("WWW-Authenticate", `Bearer realm="mailyard"`)
	return e
}

// installErrorModel makes Huma produce our envelope for its own errors. Internal
// details of 5xx answers are logged with the request id and never sent.
func installErrorModel(logger *slog.Logger) {
	errorLogger = logger
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		return buildError(context.Background(), status, msg, errs...)
	}
	huma.NewErrorWithContext = func(hctx huma.Context, status int, msg string, errs ...error) huma.StatusError {
		ctx := context.Background()
		if hctx != nil {
			ctx = hctx.Context()
		}
		return buildError(ctx, status, msg, errs...)
	}
}

// errorLogger receives the causes of 5xx answers; huma.NewError is package-global,
// and so is its logger.
var errorLogger = slog.Default()

func buildError(ctx context.Context, status int, msg string, errs ...error) huma.StatusError {
	if status >= 500 {
		if status == http.StatusServiceUnavailable {
			return NewAPIError(status, CodeUnavailable, "a dependency is unavailable; try again")
		}
		errorLogger.ErrorContext(ctx, "request failed", "request_id", RequestID(ctx), "status", status, "message", msg, "error", errors.Join(errs...))
		return NewAPIError(status, CodeInternal, "internal error; quote request id "+RequestID(ctx))
	}
	var details []ErrorDetail
	for _, err := range errs {
		if err == nil {
			continue
		}
		var d huma.ErrorDetailer
		if errors.As(err, &d) {
			hd := d.ErrorDetail()
			details = append(details, ErrorDetail{Location: missingPropertyLocation(hd.Location, hd.Message), Message: hd.Message})
			continue
		}
		details = append(details, ErrorDetail{Message: err.Error()})
	}
	if status == http.StatusBadRequest && len(details) > 0 && details[0].Location == "body" {
		msg = "request body is not valid JSON"
	}
	return NewAPIError(status, codeForStatus(status), msg, details...)
}

// convertError turns what a handler returned into an answer: an *apperr.Error
// (the first in the chain) with its code's status from httpStatusByCode and its
// message; an unreachable database or Temporal with a 503. Anything else becomes
// a 500 whose cause is logged, not sent.
func convertError(ctx context.Context, err error) error {
	var apiErr *ErrorResponse
	var appErr *apperr.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &appErr):
		status, known := httpStatusByCode[appErr.Code]
		if !known || appErr.Code == apperr.Internal {
			// Unknown codes are bugs, and internal errors are never explained.
			return buildError(ctx, http.StatusInternalServerError, "unexpected error", err)
		}
		return NewAPIError(status, appErr.Code, appErr.Message)
	case errors.Is(err, context.DeadlineExceeded), isUnavailable(err):
		return newError(CodeUnavailable, "a dependency is unavailable; try again")
	default:
		return buildError(ctx, http.StatusInternalServerError, "unexpected error", err)
	}
}

// missingPropertyLocation points a "required property" error at the property
// itself (body.domain rather than body), so clients can show it beside the field.
func missingPropertyLocation(location, message string) string {
	const prefix, suffix = "expected required property ", " to be present"
	if prop, ok := strings.CutPrefix(message, prefix); ok && strings.HasSuffix(prop, suffix) {
		return location + "." + strings.TrimSuffix(prop, suffix)
	}
	return location
}
