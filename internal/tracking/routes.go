package tracking

import (
	"context"
	"errors"
	"html/template"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

// pixel is a 1×1 transparent GIF (43 bytes).
var pixel = []byte{
	'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0, // header, 1×1, 2-colour table
	0, 0, 0, 0xff, 0xff, 0xff, // the colour table
	0x21, 0xf9, 4, 1, 0, 0, 0, 0, // graphic control: colour 0 is transparent
	0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0, // image descriptor
	2, 2, 0x44, 1, 0, // the one pixel, LZW
	0x3b, // trailer
}

// maxFormBody bounds an unsubscribe POST's body: the form has one field.
const maxFormBody = 16 << 10

// Routes serves the tracking routes (docs/tracking.md) on the API's public
// listener and on the custom domains' HTTPS listener. A pixel or click
// answers from at most one indexed read and queues its event; an
// unsubscribe is recorded before it answers.
type Routes struct {
	Keys     *tracktoken.Keys
	Store    *store.Store
	Recorder *Recorder
	Queue    *Queue
	// Hosts are the host names of MAILYARD_TRACKING_URL and
	// MAILYARD_TRACKING_HOST; a request to any other host must be the
	// custom tracking domain of the email's own domain.
	Hosts  []string
	Logger *slog.Logger
	// Now is the clock of the throttle of repeated opens and clicks
	// (nil: time.Now).
	Now func() time.Time

	recent recentTokens
}

// Register adds the routes to mux.
func (rt *Routes) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+OpenPath+"{file}", rt.open)
	mux.HandleFunc("GET "+ClickPath+"{token}", rt.click)
	mux.HandleFunc("GET "+UnsubscribePath+"{token}", rt.unsubscribePage)
	mux.HandleFunc("POST "+UnsubscribePath+"{token}", rt.unsubscribe)
}

// open answers the pixel for any token, so a client learns nothing from
// it, and records the open of a valid one.
func (rt *Routes) open(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "image/gif")
	h.Set("Cache-Control", "no-store")
	w.Write(pixel)
	tok, err := rt.Keys.Parse(tracktoken.Open, strings.TrimSuffix(r.PathValue("file"), pixelSuffix))
	if err != nil {
		metrics.CountTrackingRequest("open", "invalid")
		return
	}
	metrics.CountTrackingRequest("open", "ok")
	if !rt.recent.first(tok, rt.now()) {
		return // this recipient's open was recorded moments ago
	}
	ua := cleanUserAgent(r.UserAgent()) // cut before queueing: the header may be 64 KiB
	rt.Queue.Add(func(ctx context.Context) error { return rt.Recorder.Open(ctx, tok, ua) })
}

// click redirects to the link's stored URL, and only to it.
func (rt *Routes) click(w http.ResponseWriter, r *http.Request) {
	tok, err := rt.Keys.Parse(tracktoken.Click, r.PathValue("token"))
	if err != nil {
		rt.unknownLink(w, "click", "invalid")
		return
	}
	target, err := rt.Store.ClickTarget(r.Context(), tok.EmailID.String(), tok.Link)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			rt.Logger.Error("tracking: reading a link", "error", err)
			rt.page(w, http.StatusServiceUnavailable, pageUnavailable, "")
			return
		}
		rt.unknownLink(w, "click", "unknown")
		return
	}
	if !rt.hostAllowed(r, target.TrackingDomain) || !redirectable(target.URL) {
		rt.unknownLink(w, "click", "unknown")
		return
	}
	metrics.CountTrackingRequest("click", "ok")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	// Set, not http.Redirect: the URL goes out exactly as the customer
	// wrote it (http.Redirect would clean and re-escape it).
	w.Header().Set("Location", target.URL)
	w.WriteHeader(http.StatusFound)
	if !rt.recent.first(tok, rt.now()) {
		return // this recipient's click of this link was recorded moments ago
	}
	ua, link := cleanUserAgent(r.UserAgent()), target.URL // cut before queueing, as for open
	rt.Queue.Add(func(ctx context.Context) error { return rt.Recorder.Click(ctx, tok, link, ua) })
}

func (rt *Routes) now() time.Time {
	if rt.Now != nil {
		return rt.Now()
	}
	return time.Now()
}

// unknownLink answers a token that is not valid, or names nothing that may be
// followed, with the same 404 page, and counts it under the route and outcome.
func (rt *Routes) unknownLink(w http.ResponseWriter, route, outcome string) {
	metrics.CountTrackingRequest(route, outcome)
	rt.page(w, http.StatusNotFound, pageUnknownLink, "")
}

// unsubscribePage asks for confirmation and changes nothing: link scanners
// fetch every link of a message.
func (rt *Routes) unsubscribePage(w http.ResponseWriter, r *http.Request) {
	if _, err := rt.Keys.Parse(tracktoken.Unsubscribe, r.PathValue("token")); err != nil {
		rt.unknownLink(w, "unsubscribe_page", "invalid")
		return
	}
	metrics.CountTrackingRequest("unsubscribe_page", "ok")
	rt.page(w, http.StatusOK, pageConfirm, r.URL.Path)
}

// unsubscribe is RFC 8058's one-click POST (and the confirm page's form).
func (rt *Routes) unsubscribe(w http.ResponseWriter, r *http.Request) {
	tok, err := rt.Keys.Parse(tracktoken.Unsubscribe, r.PathValue("token"))
	if err != nil {
		rt.unknownLink(w, "unsubscribe", "invalid")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	if !oneClick(r) {
		metrics.CountTrackingRequest("unsubscribe", "bad_request")
		rt.page(w, http.StatusBadRequest, pageBadRequest, "")
		return
	}
	if err := rt.Recorder.Unsubscribe(r.Context(), tok); err != nil {
		rt.Logger.Error("tracking: recording an unsubscribe", "error", err)
		rt.page(w, http.StatusServiceUnavailable, pageUnavailable, "")
		return
	}
	metrics.CountTrackingRequest("unsubscribe", "ok")
	rt.page(w, http.StatusOK, pageUnsubscribed, "")
}

// oneClick reports whether the body is RFC 8058's
// List-Unsubscribe=One-Click, form-encoded or multipart.
func oneClick(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		if r.ParseMultipartForm(maxFormBody) != nil {
			return false
		}
	case "application/x-www-form-urlencoded":
		if r.ParseForm() != nil {
			return false
		}
	default:
		return false
	}
	return r.PostForm.Get("List-Unsubscribe") == "One-Click"
}

// hostAllowed refuses a click that arrives at a custom tracking domain
// other than its own email's: one organization's domain does not redirect
// for another's tokens.
func (rt *Routes) hostAllowed(r *http.Request, trackingDomain *string) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, h := range rt.Hosts {
		if host == h {
			return true
		}
	}
	return trackingDomain != nil && host == *trackingDomain
}

// redirectable reports whether the stored URL is one the click route may
// send a browser to: http or https only, whatever was stored.
func redirectable(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// The pages of the routes: short, no JavaScript, nothing from elsewhere.
const (
	pageConfirm = iota
	pageUnsubscribed
	pageUnknownLink
	pageBadRequest
	pageUnavailable
)

var pages = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{{.Title}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}button{font-size:1rem;padding:.5rem 1rem}</style>
</head><body><h1>{{.Title}}</h1><p>{{.Text}}</p>
{{if .Action}}<form method="post" action="{{.Action}}"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>{{end}}
</body></html>
`))

var pageText = map[int]struct{ Title, Text string }{
	pageConfirm:      {"Unsubscribe", "Stop receiving emails like this one at this address?"},
	pageUnsubscribed: {"You are unsubscribed", "This address will no longer receive emails like this one."},
	pageUnknownLink:  {"Link not found", "This link is not valid or has expired."},
	pageBadRequest:   {"Bad request", "The request is not a one-click unsubscribe."},
	pageUnavailable:  {"Try again later", "The service is unavailable at the moment."},
}

func (rt *Routes) page(w http.ResponseWriter, status, which int, action string) {
	p := pageText[which]
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = pages.Execute(w, struct{ Title, Text, Action string }{p.Title, p.Text, action})
}

// Queue runs the event writes of opens and clicks after their answer, so a
// pixel or redirect does not wait for the database. When it is full, Add
// runs the write in the request instead: under a flood, requests slow down
// rather than lose events.
//
// Close, not a context, ends it: the listeners serving the routes keep
// answering requests for a while after shutdown begins, and their events
// must still be written, before the store is closed.
type Queue struct {
	jobs   chan func(context.Context) error
	logger *slog.Logger

	// mu orders Add's sends before Close closes jobs.
	mu     sync.RWMutex
	closed bool
	// pending counts the jobs queued and not yet run; Close waits for it.
	pending sync.WaitGroup
}

// NewQueue makes a queue of size jobs; Run works it.
func NewQueue(size int, logger *slog.Logger) *Queue {
	return &Queue{jobs: make(chan func(context.Context) error, size), logger: logger}
}

// Add queues a job, or runs it now when the queue is full or closed.
func (q *Queue) Add(job func(context.Context) error) {
	q.mu.RLock()
	if !q.closed {
		q.pending.Add(1)
		select {
		case q.jobs <- job:
			q.mu.RUnlock()
			return
		default:
			q.pending.Done()
		}
	}
	q.mu.RUnlock()
	q.run(context.Background(), job)
}

// Run works the queue with n workers until Close, and returns once they
// have run the jobs left in it.
func (q *Queue) Run(n int) {
	var workers sync.WaitGroup
	for range n {
		workers.Go(func() { q.work() })
	}
	workers.Wait()
}

// Close stops queueing (a later Add runs its job in the caller) and
// returns once every job queued has run, by Run's workers or by Close
// itself when Run is not working the queue. Call it after the listeners
// serving the routes have shut down, and before closing the store.
func (q *Queue) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.jobs)
	}
	q.mu.Unlock()
	q.work()
	q.pending.Wait()
}

// work runs queued jobs until the queue is closed and empty.
func (q *Queue) work() {
	for job := range q.jobs {
		q.run(context.Background(), job)
		q.pending.Done()
	}
}

// jobTimeout bounds one event write.
const jobTimeout = 30 * time.Second

func (q *Queue) run(ctx context.Context, job func(context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, jobTimeout)
	defer cancel()
	if err := job(ctx); err != nil {
		q.logger.Error("tracking: recording an event", "error", err)
	}
}

// RepeatWindow is how long after recording a recipient's open (or click of
// one link) the same process records none of the same again. A mail client
// fetches the pixel once per view, while anyone holding the image's or the
// link's URL can fetch it in a loop: each recorded one is a database write.
const RepeatWindow = time.Minute

// maxRecentTokens bounds recentTokens; past it, entries older than the
// window are dropped, and of the recent ones at most half are kept.
const maxRecentTokens = 100_000

// recentTokens remembers when each open or click token was last recorded.
type recentTokens struct {
	mu   sync.Mutex
	seen map[tracktoken.Token]time.Time
}

// first reports whether t at now is to be recorded, and notes it.
func (o *recentTokens) first(t tracktoken.Token, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if at, ok := o.seen[t]; ok && now.Sub(at) < RepeatWindow {
		return false
	}
	if o.seen == nil || len(o.seen) >= maxRecentTokens {
		old := o.seen
		o.seen = make(map[tracktoken.Token]time.Time)
		for k, at := range old {
			if now.Sub(at) < RepeatWindow && len(o.seen) < maxRecentTokens/2 {
				o.seen[k] = at
			}
		}
	}
	o.seen[t] = now
	return true
}
