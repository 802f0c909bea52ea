package api

import (
	"net/http"
	"time"
)

// withoutBodylessReadDeadlines keeps a request that has no body from
// being canceled by the read deadline Huma sets to bound the reading of an
// operation's body (BodyReadTimeout, 5 s by default). For such a request
// net/http already reads the connection in the background (to learn whether
// the client went away) before the handler runs; a deadline set then ends
// that read and cancels the request's context, so a bodiless POST to an
// operation whose body is optional (a webhook's test event, a secret
// rotation) that still ran 5 s later failed with 500 instead of its own
// answer (503 when Temporal is slow). There is nothing to read, so there is
// nothing for the deadline to bound.
func withoutBodylessReadDeadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == http.NoBody {
			w = noReadDeadline{w}
		}
		next.ServeHTTP(w, r)
	})
}

// noReadDeadline ignores read deadlines (huma.SetReadDeadline and
// http.ResponseController find this method first) and passes the rest on.
type noReadDeadline struct{ http.ResponseWriter }

func (noReadDeadline) SetReadDeadline(time.Time) error { return nil }

func (w noReadDeadline) Unwrap() http.ResponseWriter { return w.ResponseWriter }
