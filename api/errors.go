package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/store"
)

// Error codes the API answers with. The HTTP status says the class, the code
// says which; the README's table lists each with its status.
const (
	CodeBadRequest            = "bad_request"             // 400
	CodeUnauthorized          = "unauthorized"            // 401
	CodeForbidden             = "forbidden"               // 403
	CodeNotFound              = "not_found"               // 404
	CodeMethodNotAllowed      = "method_not_allowed"      // 405
	CodeDomainExists          = "domain_exists"           // 409
	CodeDomainNotVerified     = "domain_not_verified"     // 409
	CodeConflict              = "conflict"                // 409
	CodeWebhookLimitReached   = "webhook_limit_reached"   // 409
	CodeIdempotencyInProgress = "idempotency_in_progress" // 409
	CodeRotationInProgress    = "rotation_in_progress"    // 409
	CodeTooManySecrets        = "too_many_secrets"        // 409
	CodePayloadTooLarge       = "payload_too_large"       // 413
	CodeValidationFailed      = "validation_failed"       // 422
	CodeIdempotencyKeyReused  = "idempotency_key_reused"  // 422
	CodeRateLimited           = "rate_limited"            // 429
	CodeInternal              = "internal"                // 500
	CodeUnavailable           = "unavailable"             // 503
)

// codeForStatus is the default code of a status, used for errors that Huma itself
// raises (validation, body parsing, size limit) and that carry no code of their own.
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
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
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

// NewAPIError builds an error answer with an explicit code.
func NewAPIError(status int, code, message string, details ...ErrorDetail) *ErrorResponse {
	return &ErrorResponse{status: status, headers: http.Header{}, Status: "error", Err: ErrorBody{Code: code, Message: message, Details: details}}
}

// fieldError is a 422 for one field, in the same shape as Huma's own validation errors.
func fieldError(location, message string) *ErrorResponse {
	return NewAPIError(http.StatusUnprocessableEntity, CodeValidationFailed, "validation failed", ErrorDetail{Location: location, Message: message})
}

func notFoundError(what string) *ErrorResponse {
	return NewAPIError(http.StatusNotFound, CodeNotFound, what+" not found")
}

func unauthorizedError(message string) *ErrorResponse {
	e := NewAPIError(http.StatusUnauthorized, CodeUnauthorized, message)
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

// convertError maps errors from the store and Temporal to answers. Anything it does
// not recognise becomes a 500 whose cause is logged, not sent.
func convertError(ctx context.Context, err error) error {
	var apiErr *ErrorResponse
	switch {
	case err == nil:
		return nil
	case errors.As(err, &apiErr):
		return apiErr
	case errors.Is(err, store.ErrNotFound):
		return notFoundError("resource")
	case errors.Is(err, store.ErrDomainNotVerified):
		return NewAPIError(http.StatusConflict, CodeDomainNotVerified, "the domain is not verified")
	case errors.Is(err, store.ErrRotationInProgress):
		return NewAPIError(http.StatusConflict, CodeRotationInProgress, "a DKIM rotation of this domain is in progress")
	case errors.Is(err, context.DeadlineExceeded), isUnavailable(err):
		return NewAPIError(http.StatusServiceUnavailable, CodeUnavailable, "a dependency is unavailable; try again")
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
