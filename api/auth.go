package api

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/store"
)

// Permissions a key can carry (docs/credentials.md).
const (
	PermissionSend  = "send"
	PermissionStats = "stats"
	PermissionAdmin = "admin"
)

// bearerScheme is the security scheme's name in the OpenAPI document.
const bearerScheme = "bearer"

// permissionMetadata is the Operation.Metadata key holding the permissions
// that admit a key to an operation: a string, or a []string of which the key
// needs any one. Unset means admin.
const permissionMetadata = "mailyard-permission"

// operationPermissions lists the permissions that admit a key to op, any one
// of them sufficing.
func operationPermissions(op *huma.Operation) []string {
	switch p := op.Metadata[permissionMetadata].(type) {
	case string:
		if p != "" {
			return []string{p}
		}
	case []string:
		if len(p) > 0 {
			return p
		}
	}
	return []string{PermissionAdmin}
}

// Principal is the authenticated key behind a request.
type Principal struct {
	KeyID          int64
	OrganizationID int64
	// SendingDomainID is the domain the key is scoped to (nil for an
	// organization-wide key); the send and stats operations are limited to it.
	SendingDomainID *int64
	// SendingDomain is that domain as it was read with the key (nil when it
	// was deleted), so that a send reads the database once before it writes.
	SendingDomain *store.Domain
	Permissions   store.Permissions
}

type principalKey struct{}

func principalFrom(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// writeMiddlewareError answers from a Huma middleware, before any operation
// runs, with the error envelope.
func writeMiddlewareError(api huma.API, ctx huma.Context, e *ErrorResponse) {
	for k, v := range e.headers {
		ctx.SetHeader(k, strings.Join(v, ", "))
	}
	ctx.SetHeader("Content-Type", "application/json")
	ctx.SetStatus(e.status)
	_ = api.Marshal(ctx.BodyWriter(), "application/json", e)
}

// bearerToken extracts the key from "Authorization: Bearer <key>".
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate is a Huma middleware: operations that declare the bearer scheme get
// their key checked against the database on every request (no cache: a revoked key
// must fail on the very next request, on every process), then their permission.
func (s *Server) authenticate(ctx huma.Context, next func(huma.Context)) {
	op := ctx.Operation()
	if op == nil || len(op.Security) == 0 {
		next(ctx)
		return
	}
	fail := func(e *ErrorResponse) { writeMiddlewareError(s.api, ctx, e) }

	token, ok := bearerToken(ctx.Header("Authorization"))
	if !ok {
		fail(unauthorizedError("missing bearer API key in the Authorization header"))
		return
	}
	key, err := keyauth.Check(ctx.Context(), s.store, token)
	if errors.Is(err, keyauth.ErrMalformed) {
		fail(unauthorizedError("malformed API key"))
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		fail(unauthorizedError("unknown or revoked API key"))
		return
	}
	if err != nil {
		var e *ErrorResponse
		if !errors.As(convertError(ctx.Context(), err), &e) {
			e = newError(CodeInternal, "internal error")
		}
		fail(e)
		return
	}

	// An authenticated use counts even when the permission is missing, and so
	// does it against the key's rate limit.
	s.usage.Seen(key.ID, key.LastUsedAt)
	if !s.admitRate(ctx, key.ID) {
		return
	}
	need := operationPermissions(op)
	if !slices.ContainsFunc(need, key.Permissions.Has) {
		fail(newError(CodeForbidden, "this API key lacks the "+strings.Join(need, " or ")+" permission"))
		return
	}

	next(huma.WithValue(ctx, principalKey{}, Principal{KeyID: key.ID, OrganizationID: key.OrganizationID, SendingDomainID: key.SendingDomainID, SendingDomain: key.Domain, Permissions: key.Permissions}))
}
