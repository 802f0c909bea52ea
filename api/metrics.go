package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/metrics"
)

// Request metrics come from two layers: withMetrics wraps the whole handler
// to see the status written and the time taken, whatever answered (Huma, the
// enveloped fallbacks, the docs, a recovered panic); recordOperation, the
// first Huma middleware, tells it which operation the router matched. A
// request that matched none is counted as operation "other".

type operationKey struct{}

// operationSlot is where recordOperation leaves the operation id for
// withMetrics, which reads it after the handler returns.
type operationSlot struct{ id string }

// withMetrics counts every request with its operation, status and latency.
func withMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		slot := &operationSlot{}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			status := sw.status
			if v := recover(); v != nil {
				// http.ErrAbortHandler (withRequestID answers every
				// other panic): the answer was cut off.
				if status == 0 {
					status = http.StatusInternalServerError
				}
				metrics.ObserveHTTPRequest(slot.id, status, time.Since(start))
				panic(v)
			}
			if status == 0 {
				status = http.StatusOK // nothing written: net/http answers 200
			}
			metrics.ObserveHTTPRequest(slot.id, status, time.Since(start))
		}()
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), operationKey{}, slot)))
	})
}

// recordOperation is a Huma middleware that names the matched operation for
// withMetrics. It runs before authentication, so refused requests count
// under their operation too.
func recordOperation(ctx huma.Context, next func(huma.Context)) {
	if slot, ok := ctx.Context().Value(operationKey{}).(*operationSlot); ok {
		if op := ctx.Operation(); op != nil {
			slot.id = op.OperationID
		}
	}
	next(ctx)
}

// statusWriter remembers the first status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer (flush,
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
