package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/periodic"
	"github.com/mailyard/mailyard/internal/store"
)

// Idempotency keys: a POST under /api/v1 with an Idempotency-Key header runs
// once per organization and key within idempotencyRetention; a repeat of the
// same request gets the first answer again, with Idempotent-Replayed: true.
// The database, not this process, holds the keys, so this holds across API
// processes.
const (
	idempotencyHeader       = "Idempotency-Key"
	idempotencyReplayHeader = "Idempotent-Replayed"
	idempotencyMaxKeyLength = 255

	// idempotencyRetention is how long a key and its answer are kept.
	idempotencyRetention = 24 * time.Hour

	// idempotencyLock is how long a claim lasts without its request. The
	// request that holds it renews it every idempotencyRenewEvery while it
	// runs, so a live claim is never taken over however long the operation
	// takes; a request whose process dies (SIGKILL, power loss) leaves its
	// claim, and at most idempotencyLock later the same request, retried,
	// runs again (or gets the answer its operation stored, see answerInTx).
	idempotencyLock       = 15 * time.Second
	idempotencyRenewEvery = 5 * time.Second

	// defaultIdempotencyWait is how long a request waits for the answer of the
	// same request still running elsewhere before it answers 409
	// idempotency_in_progress. Clients that retry at once after a timeout, or
	// send the same request twice in parallel, thus get the answer itself.
	defaultIdempotencyWait = 10 * time.Second

	// idempotencySweepEvery is how often expired keys are deleted.
	idempotencySweepEvery = 10 * time.Minute
)

// storedAnswer is what a key keeps of its first answer, sealed at rest.
type storedAnswer struct {
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
}

// RequestFingerprint is what identifies a request for its idempotency key:
// SHA-256 over the API key's id, method, path and body.
func RequestFingerprint(keyID int64, method, path string, body []byte) []byte {
	h := sha256.New()
	h.Write(strconv.AppendInt(nil, keyID, 10))
	h.Write([]byte{0})
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// validIdempotencyKey accepts 1 to 255 printable ASCII characters.
func validIdempotencyKey(key string) bool {
	if key == "" || len(key) > idempotencyMaxKeyLength {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// storableStatus says which answers a key keeps: successes and client errors
// that the same request would get again. Server errors, timeouts and 429 are
// worth retrying, so the key is released for the retry.
func storableStatus(status int) bool {
	switch {
	case status >= 200 && status < 300:
		return true
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return false
	default:
		return status >= 400 && status < 500
	}
}

// idempotency is a Huma middleware, after authentication (it needs the
// organization) and the rate limit.
func (s *Server) idempotency(ctx huma.Context, next func(huma.Context)) {
	op := ctx.Operation()
	key, present := idempotencyKeyOf(ctx)
	if op == nil || op.Method != http.MethodPost || len(op.Security) == 0 || !strings.HasPrefix(op.Path, "/api/v1/") || !present {
		next(ctx)
		return
	}
	fail := func(err error) { writeMiddlewareError(s.api, ctx, asAPIError(ctx.Context(), err)) }
	if !validIdempotencyKey(key) {
		fail(fieldError("header."+idempotencyHeader, "Idempotency-Key must be 1 to 255 printable ASCII characters"))
		return
	}
	// The operation's own limit (register sets one on every operation;
	// Send email's is 10 MiB), which Huma answers 413 at: a body read up
	// to it is whole, one that reaches it is too large.
	limit := op.MaxBodyBytes
	// Read within the operation's time, as Huma would read it; net/http
	// lifts the deadline once the body has been read to its end.
	if op.BodyReadTimeout > 0 {
		_ = ctx.SetReadDeadline(time.Now().Add(op.BodyReadTimeout))
	}
	body, err := io.ReadAll(io.LimitReader(ctx.BodyReader(), limit))
	if err != nil {
		fail(apperr.Errorf(apperr.BadRequest, "", "cannot read the request body"))
		return
	}
	rec := &recordingContext{innerContext: ctx, ctx: ctx.Context(), body: body, header: http.Header{}}
	if int64(len(body)) >= limit {
		next(rec) // answered 413 by the operation; nothing to remember
		return
	}
	if _, err := s.secretBox(); err != nil {
		fail(err)
		return
	}
	p := principalFrom(ctx.Context())
	orgID := p.OrganizationID
	url := ctx.URL()
	// The key is the organization's, the request the API key's: another
	// API key of the organization that sends the same Idempotency-Key
	// (one scoped to another domain, say) is refused, never replayed an
	// answer it may not see.
	fingerprint := RequestFingerprint(p.KeyID, op.Method, url.Path, body)
	binding := store.IdempotencyBinding(orgID, key)

	deadline := time.Now().Add(s.idempotencyWait)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		held, row, err := s.store.ClaimIdempotencyKey(ctx.Context(), orgID, key, fingerprint, idempotencyLock, idempotencyRetention)
		if err != nil {
			fail(err)
			return
		}
		if row == nil {
			s.answerOnce(rec, next, &idempotencyClaim{held: held, binding: binding})
			return
		}
		if !bytes.Equal(row.Fingerprint, fingerprint) {
			fail(apperr.Errorf(apperr.IdempotencyKeyReused, "idempotency key",
				"this Idempotency-Key was used for another request (method, path or body differ); use a new key for a new request"))
			return
		}
		if row.Answered(time.Now()) {
			if err := s.replay(ctx, row, binding); err != nil {
				fail(err)
			}
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			fail(apperr.Errorf(apperr.IdempotencyInProgress, "idempotency key",
				"a request with this Idempotency-Key is still being answered; retry shortly to get its answer"))
			return
		}
		select {
		case <-ctx.Context().Done():
			fail(ctx.Context().Err())
			return
		case <-time.After(min(wait, left)):
		}
	}
}

// idempotencyClaim is the key a request claimed, for the operation it runs
// (answerInTx).
type idempotencyClaim struct {
	held    store.IdempotencyClaim
	binding []byte
	// savedInTx: the operation stored its answer in its own transaction.
	savedInTx atomic.Bool
}

type idempotencyClaimKey struct{}

// answerOnce runs the operation for a claimed key, renewing the claim while
// it runs, and keeps its answer, or releases the key when the answer is worth
// retrying (or the handler panics).
func (s *Server) answerOnce(rec *recordingContext, next func(huma.Context), claim *idempotencyClaim) {
	held, binding := claim.held, claim.binding
	ctx := context.WithoutCancel(rec.innerContext.Context())
	answered := false
	renewing := make(chan struct{})
	go s.renewIdempotencyClaim(ctx, claim, renewing)
	defer func() {
		close(renewing)
		if answered {
			return
		}
		if err := s.store.ReleaseIdempotencyKey(ctx, held); err != nil {
			s.logger.ErrorContext(ctx, "releasing an idempotency key", "request_id", RequestID(ctx), "error", err)
		}
	}()
	rec.ctx = context.WithValue(rec.ctx, idempotencyClaimKey{}, claim)
	next(rec)
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	if !storableStatus(status) {
		return
	}
	plain, err := json.Marshal(storedAnswer{Header: rec.header, Body: rec.buf.Bytes()})
	if err == nil {
		var sealed []byte
		if sealed, err = s.box.Seal(plain, binding); err == nil {
			if claim.savedInTx.Load() && status >= 200 && status < 300 {
				// The operation committed with its answer; keep the answer as
				// it was sent, headers included.
				err = s.store.ReplaceIdempotentResponse(ctx, held, status, sealed)
			} else {
				err = s.store.SaveIdempotentResponse(ctx, held, status, sealed)
			}
		}
	}
	if err != nil {
		if claim.savedInTx.Load() {
			// The answer stored with the operation stays, and counts once
			// its lock runs out.
			answered = true
		}
		// The client has its answer; a retry with the key runs the
		// operation again once the claim is released, or replays the
		// answer stored with the operation.
		s.logger.ErrorContext(ctx, "storing an idempotent answer", "request_id", RequestID(ctx), "error", err)
		return
	}
	answered = true
}

// undoAnswerInTx removes the answer an operation stored with its creation
// (answerInTx) when the operation is undone after all, so that a retry runs it
// again instead of getting an answer about something that no longer exists.
func (s *Server) undoAnswerInTx(ctx context.Context) error {
	claim, ok := ctx.Value(idempotencyClaimKey{}).(*idempotencyClaim)
	if !ok || !claim.savedInTx.Load() {
		return nil
	}
	if err := s.store.UnanswerIdempotencyKey(ctx, claim.held); err != nil {
		return err
	}
	claim.savedInTx.Store(false)
	return nil
}

// renewIdempotencyClaim moves the claim's lock forward until done closes.
func (s *Server) renewIdempotencyClaim(ctx context.Context, claim *idempotencyClaim, done <-chan struct{}) {
	t := time.NewTicker(idempotencyRenewEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if err := s.store.ExtendIdempotencyClaim(ctx, claim.held, idempotencyLock); err != nil {
				s.logger.WarnContext(ctx, "renewing an idempotency key's claim", "request_id", RequestID(ctx), "error", err)
			}
		}
	}
}

// errClaimTakenOver: the key's claim was taken over while this request ran
// (its lock ran out, the request's process having stalled), and the other
// request runs the operation; this request's is rolled back.
var errClaimTakenOver = apperr.Errorf(apperr.IdempotencyInProgress, "idempotency key",
	"another request with this Idempotency-Key took it over while this one ran; retry to get its answer")

// answerInTx makes the store's creation run with the returned context store
// the request's idempotent answer in its own transaction (store.WithCommitHook):
// an API process killed between the commit and the answer's usual saving
// still leaves the answer, and a retry gets it instead of creating a second
// resource. status and answer are what the operation answers once it
// succeeds. Without an Idempotency-Key, ctx is returned as it is.
func (s *Server) answerInTx(ctx context.Context, status int, answer func() any) context.Context {
	claim, ok := ctx.Value(idempotencyClaimKey{}).(*idempotencyClaim)
	if !ok {
		return ctx
	}
	return store.WithCommitHook(ctx, func(ctx context.Context, tx bun.Tx) error {
		var body bytes.Buffer
		if err := s.api.Marshal(&body, "application/json", answer()); err != nil {
			return err
		}
		plain, err := json.Marshal(storedAnswer{Header: http.Header{"Content-Type": {"application/json"}}, Body: body.Bytes()})
		if err != nil {
			return err
		}
		sealed, err := s.box.Seal(plain, claim.binding)
		if err != nil {
			return err
		}
		saved, err := store.SaveIdempotentResponseIn(ctx, tx, claim.held, status, sealed)
		if err != nil {
			return err
		}
		if !saved {
			return errClaimTakenOver
		}
		claim.savedInTx.Store(true)
		return nil
	})
}

// replay writes a key's stored answer.
func (s *Server) replay(ctx huma.Context, row *store.IdempotencyKey, binding []byte) error {
	plain, err := s.box.Open(row.ResponseEnc, binding)
	if err != nil {
		return err
	}
	var a storedAnswer
	if err := json.Unmarshal(plain, &a); err != nil {
		return err
	}
	for name, values := range a.Header {
		for i, v := range values {
			if i == 0 {
				ctx.SetHeader(name, v)
			} else {
				ctx.AppendHeader(name, v)
			}
		}
	}
	ctx.SetHeader(idempotencyReplayHeader, "true")
	ctx.SetStatus(*row.ResponseStatus)
	_, err = ctx.BodyWriter().Write(a.Body)
	if err != nil {
		s.logger.WarnContext(ctx.Context(), "writing a replayed answer", "error", err)
	}
	return nil
}

// idempotencyKeyOf returns the header's value and whether it was sent at all
// (an empty value is a bad key, not a missing one).
func idempotencyKeyOf(ctx huma.Context) (string, bool) {
	present := false
	ctx.EachHeader(func(name, _ string) {
		if strings.EqualFold(name, idempotencyHeader) {
			present = true
		}
	})
	return ctx.Header(idempotencyHeader), present
}

// asAPIError is convertError for middleware, which must write an envelope.
func asAPIError(ctx context.Context, err error) *ErrorResponse {
	var e *ErrorResponse
	if !errors.As(convertError(ctx, err), &e) {
		e = newError(CodeInternal, "internal error; quote request id "+RequestID(ctx))
	}
	return e
}

// innerContext lets recordingContext embed a huma.Context: a field named
// Context would hide the Context method.
type innerContext huma.Context

// recordingContext gives the operation the body the middleware already read,
// and keeps a copy of what it answers.
type recordingContext struct {
	innerContext
	// ctx is the request's context with the claim (answerInTx).
	ctx    context.Context
	body   []byte
	status int
	header http.Header
	buf    bytes.Buffer
}

func (c *recordingContext) BodyReader() io.Reader { return bytes.NewReader(c.body) }

// SetReadDeadline does nothing: the middleware has read the body, and once
// it has, net/http reads the connection in the background to learn whether
// the client went away. A deadline set then (Huma sets its BodyReadTimeout,
// 5 s, before it reads the body) ends that read and cancels the request's
// context: every idempotent request still running 5 s later was canceled,
// and the next request on the connection failed at once.
func (c *recordingContext) SetReadDeadline(time.Time) error { return nil }

func (c *recordingContext) Context() context.Context { return c.ctx }

func (c *recordingContext) SetStatus(code int) {
	c.status = code
	c.innerContext.SetStatus(code)
}

func (c *recordingContext) SetHeader(name, value string) {
	c.header.Set(name, value)
	c.innerContext.SetHeader(name, value)
}

func (c *recordingContext) AppendHeader(name, value string) {
	c.header.Add(name, value)
	c.innerContext.AppendHeader(name, value)
}

func (c *recordingContext) BodyWriter() io.Writer {
	return io.MultiWriter(&c.buf, c.innerContext.BodyWriter())
}

// sweepIdempotencyKeys deletes expired keys now and then until ctx ends: a
// minute after start (not at once, so a starting process does not touch the
// database before it serves), then every idempotencySweepEvery. Every API
// process sweeps; the deletes are idempotent.
func (s *Server) sweepIdempotencyKeys(ctx context.Context) {
	periodic.Every(ctx, time.Minute, idempotencySweepEvery, func(ctx context.Context) {
		if n, err := s.store.DeleteExpiredIdempotencyKeys(ctx, time.Now()); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "deleting expired idempotency keys", "error", err)
		} else if n > 0 {
			s.logger.InfoContext(ctx, "deleted expired idempotency keys", "count", n)
		}
	})
}
