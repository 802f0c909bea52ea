package api

import (
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/ratelimit"
)

// admitRate charges the request to its key, sets the rate-limit headers and, over
// the limit, answers 429. It reports whether the request may go on.
func (s *Server) admitRate(ctx huma.Context, keyID int64) bool {
	if s.limits == nil {
		return true
	}
	v := s.limits.Take(keyID, time.Now())
	ctx.SetHeader("RateLimit-Policy", s.limits.Policy)
	ctx.SetHeader("RateLimit", ratelimit.PolicyName+";r="+strconv.Itoa(v.Remaining)+";t="+strconv.Itoa(int(v.Full/time.Second)))
	if v.Allowed {
		return true
	}
	e := newError(CodeRateLimited,
		"this API key is over its rate limit; retry after "+strconv.Itoa(int(v.RetryAfter/time.Second))+" s")
	e.headers.Set("Retry-After", strconv.Itoa(int(v.RetryAfter/time.Second)))
	writeMiddlewareError(s.api, ctx, e)
	return false
}
