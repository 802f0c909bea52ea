package api

import (
	"encoding/json"
	"net/http"
)

// withEnvelopedFallbacks answers unknown routes with the error envelope: 404
// not_found. A route is a method and a path, so a path asked with a method it
// does not take is an unknown route too (README, "Errors"); its answer keeps
// the Allow header ServeMux computes, which tells the client the methods the
// path does take. ServeMux decides which case applies; we write the body.
func withEnvelopedFallbacks(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusMethodNotAllowed:
			allow := probe.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, newError(CodeNotFound, "route "+r.Method+" "+r.URL.Path+" not found; the path takes "+allow))
		case http.StatusNotFound:
			writeError(w, notFoundError("route "+r.Method+" "+r.URL.Path))
		default:
			// A redirect ServeMux makes for a cleaned path: let it answer.
			mux.ServeHTTP(w, r)
		}
	})
}

// statusProbe records what a fallback handler would answer without sending it.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(status int)      { p.status = status }

// writeError writes the envelope outside Huma (middleware, fallbacks).
func writeError(w http.ResponseWriter, e *ErrorResponse) {
	for k, v := range e.headers {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(e)
}
