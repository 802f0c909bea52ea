package api

import (
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// conventionsForOperation adds to an operation, before it is registered, what
// the API conventions add to it: on authenticated operations the 429 of the
// rate limit, and on POSTs under /api/v1 the Idempotency-Key header with its
// 409 and 422 answers.
func conventionsForOperation(op *huma.Operation, authenticated bool) {
	if !authenticated {
		return
	}
	op.Errors = append(op.Errors, http.StatusTooManyRequests)
	if op.Method == http.MethodPost && strings.HasPrefix(op.Path, "/api/v1/") {
		minLen, maxLen := 1, idempotencyMaxKeyLength
		op.Parameters = append(op.Parameters, &huma.Param{
			Name: idempotencyHeader, In: "header",
			Description: "1 to 255 printable ASCII characters. Within 24 hours, the same key with the same method, path and body gets the first answer again " +
				"(with Idempotent-Replayed: true) and the operation runs once; with another request, 422 idempotency_key_reused; " +
				"while the first request is still being answered, 409 idempotency_in_progress.",
			Schema:  &huma.Schema{Type: huma.TypeString, MinLength: &minLen, MaxLength: &maxLen},
			Example: "3f1c9a52-7d0e-4b8e-9a51-2c9e0f6b7d41",
		})
		op.Errors = append(op.Errors, http.StatusConflict, http.StatusUnprocessableEntity)
	}
}

// documentResponseHeaders adds the headers of the conventions to the
// responses of every authenticated operation: the rate-limit fields on all of
// them but 401 (no key, no bucket), Retry-After on 429, and
// Idempotent-Replayed on the answers of POSTs under /api/v1.
func documentResponseHeaders(doc *huma.OpenAPI) {
	str := func(desc string) *huma.Header {
		return &huma.Header{Description: desc, Schema: &huma.Schema{Type: huma.TypeString}}
	}
	for path, item := range doc.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Post, item.Put, item.Patch, item.Delete} {
			if op == nil || len(op.Security) == 0 {
				continue
			}
			idempotent := op.Method == http.MethodPost && strings.HasPrefix(path, "/api/v1/")
			for status, res := range op.Responses {
				if status == "401" {
					continue
				}
				if res.Headers == nil {
					res.Headers = map[string]*huma.Header{}
				}
				res.Headers["RateLimit-Policy"] = str(`The key's rate-limit policy (draft-ietf-httpapi-ratelimit-headers-10), e.g. "default";q=40;w=2: 40 requests over 2 s. Absent when limits are off.`)
				res.Headers["RateLimit"] = str(`What is left of it, e.g. "default";r=39;t=1: 39 requests left, full again in 1 s. Absent when limits are off.`)
				if status == "429" {
					res.Headers["Retry-After"] = &huma.Header{Description: "Seconds to wait before the next request.", Schema: &huma.Schema{Type: huma.TypeInteger}}
				}
				if idempotent {
					res.Headers[idempotencyReplayHeader] = str("true when this is the stored answer of an earlier request with the same Idempotency-Key.")
				}
			}
		}
	}
}
