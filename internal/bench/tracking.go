package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

// The tracking benchmark's sizes: 1,000 recipients (20 emails of 50, the
// API's limit per email), 3 links each, 500 requests per second for 10 s.
const (
	trackingEmails     = 20
	trackingRecipients = 50 // per email
	trackingLinks      = 3
	trackingRate       = 500 // requests per second
	trackingDuration   = 10 * time.Second
	trackingWarmup     = time.Second
	trackingGoalP99    = 20 * time.Millisecond
)

// benchTracking measures the open pixel and the click redirect of the API's
// public handler (middleware included) on a loopback listener, with
// PostgreSQL behind it: an open-loop load at a constant rate, half pixels
// and half clicks across every recipient and link, beside the same load
// against a bare net/http handler that answers 204 (the floor of the
// machine). Then it waits for the queued event writes to land and counts
// them. No webhook is subscribed: the recorder then finds no deliveries to
// start, so the benchmark needs no Temporal server (starting a delivery is a
// Temporal call after the event's transaction).
func benchTracking(ctx context.Context, out io.Writer) error {
	fmt.Fprintln(out, "\n== tracking routes (open pixel, click redirect; the API's handler on loopback, PostgreSQL) ==")
	fmt.Fprintf(out, "load average at the start: %s\n", loadAverage())
	st, done, err := benchStore(ctx)
	if err != nil {
		return err
	}
	defer done()

	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i + 1)
	}
	env := map[string]string{
		"MAILYARD_RATE_LIMIT": "off",
		// Clicks are answered only on the tracking URL's host.
		"MAILYARD_TRACKING_URL": "http://127.0.0.1",
	}
	cfg, err := config.LoadFrom(func(name string) string { return env[name] }, config.Need{})
	if err != nil {
		return err
	}
	cfg.EncryptionKey = key
	tokens, err := tracktoken.New(key)
	if err != nil {
		return err
	}
	opens, clicks, err := seedTrackedEmails(ctx, st, tokens)
	if err != nil {
		return err
	}

	// Without webhooks the recorder never talks to Temporal; a lazy client
	// never dials.
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		return err
	}
	defer tc.Close()
	srvCtx, stopQueue := context.WithCancel(ctx)
	defer stopQueue()
	a := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: slog.New(slog.DiscardHandler)})
	ran := make(chan struct{})
	go func() { a.Run(srvCtx); close(ran) }()
	mailyard := httptest.NewServer(a.Handler())
	defer mailyard.Close()
	// A second server whose queue is worked only after its load: the
	// requests' own cost, without the event writes running beside them.
	held := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: slog.New(slog.DiscardHandler)})
	heldSrv := httptest.NewServer(held.Handler())
	defer heldSrv.Close()
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer bare.Close()

	// Every request picks a recipient (and link) at random, so most first
	// opens and clicks happen during the run and really write.
	rng := rand.New(rand.NewPCG(4711, 1))
	var mu sync.Mutex
	opened, clicked := map[int]bool{}, map[int]bool{}
	trackingRequests := func(base string) func(i int) (string, string, int) {
		return func(i int) (string, string, int) {
			mu.Lock()
			defer mu.Unlock()
			if i%2 == 0 {
				n := rng.IntN(len(opens))
				opened[n] = true
				return "pixel", base + opens[n], http.StatusOK
			}
			n := rng.IntN(len(clicks))
			clicked[n] = true
			return "click", base + clicks[n], http.StatusFound
		}
	}
	trackingRequest := trackingRequests(mailyard.URL)
	bareRequest := func(int) (string, string, int) { return "bare", bare.URL + "/t/o/x.gif", http.StatusNoContent }

	// Warm both up (connections, pools, caches); the warm-up's requests
	// count in the events expected.
	openLoop(ctx, trackingRate, trackingWarmup, bareRequest)
	openLoop(ctx, trackingRate, trackingWarmup, trackingRequest)
	if err := waitEvents(ctx, st, len(opened)+len(clicked), time.Minute); err != nil {
		return err
	}

	b := openLoop(ctx, trackingRate, trackingDuration, bareRequest)
	m := openLoop(ctx, trackingRate, trackingDuration, trackingRequest)
	ended := time.Now()
	want, wantOpened, wantClicked := len(opened)+len(clicked), len(opened), len(clicked)
	drainErr := waitEvents(ctx, st, want, 2*time.Minute)
	drained := time.Since(ended)
	counts, err := engagementCounts(ctx, st)
	if err != nil {
		return err
	}

	// The same load with the writes held back, then worked off.
	heldRequest := trackingRequests(heldSrv.URL)
	openLoop(ctx, trackingRate, trackingWarmup, heldRequest)
	h := openLoop(ctx, trackingRate, trackingDuration, heldRequest)
	heldEnded := time.Now()
	go held.Run(srvCtx)
	heldErr := waitEvents(ctx, st, len(opened)+len(clicked), 2*time.Minute)
	heldDrained := time.Since(heldEnded)

	fmt.Fprintf(out, "%d requests/s for %s, open loop (latency from each request's scheduled time), %d recipients in %d emails, %d links each; no webhook subscribed (no Temporal)\n",
		trackingRate, trackingDuration, len(opens), trackingEmails, trackingLinks)
	fmt.Fprintf(out, "  bare net/http 204        %s\n", b["bare"])
	fmt.Fprintf(out, "  GET /t/o/{token}.gif     %s\n", m["pixel"])
	fmt.Fprintf(out, "  GET /t/c/{token}         %s\n", m["click"])
	fmt.Fprintln(out, "  the same with the event writes held back until after the load (the requests' own cost):")
	fmt.Fprintf(out, "  GET /t/o/{token}.gif     %s\n", h["pixel"])
	fmt.Fprintf(out, "  GET /t/c/{token}         %s\n", h["click"])
	worst := max(m["pixel"].p99, m["click"].p99)
	verdict := "met"
	if worst >= trackingGoalP99 {
		verdict = "MISSED"
	}
	fmt.Fprintf(out, "  goal p99 < %s: %s (worst p99 %.2f ms)\n", trackingGoalP99, verdict, ms(worst))
	if b["bare"].p99 >= trackingGoalP99 {
		fmt.Fprintf(out, "  (the bare handler's own p99 is %.2f ms: this machine cannot answer the goal now, see the load average)\n", ms(b["bare"].p99))
	}

	landed := func(err error) string {
		if err != nil {
			return err.Error()
		}
		return "all landed"
	}
	fmt.Fprintf(out, "  queued writes: %s %s after the load ended (writers working during the load)\n", landed(drainErr), drained.Round(time.Millisecond))
	fmt.Fprintf(out, "    opened events %d of %d distinct recipients opened (opened_at set on %d)\n", counts.openedEvents, wantOpened, counts.openedRecipients)
	fmt.Fprintf(out, "    clicked events %d of %d distinct links clicked (clicked_at set on %d recipients)\n", counts.clickedEvents, wantClicked, counts.clickedRecipients)
	fmt.Fprintf(out, "  held-back writes (%d requests and the warm-up's): %s %s after their load ended\n", h["pixel"].requests+h["click"].requests, landed(heldErr), heldDrained.Round(time.Millisecond))
	stopQueue()
	<-ran
	fmt.Fprintf(out, "load average at the end: %s\n", loadAverage())
	return nil
}

// seedTrackedEmails stores an organization, a verified domain with opens
// and clicks tracked and its tracked emails with their links, and returns
// the paths of every recipient's pixel and of every recipient's links.
func seedTrackedEmails(ctx context.Context, st *store.Store, tokens *tracktoken.Keys) (opens, clicks []string, err error) {
	admin, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "bench", keyauth.WithSecret(admin, &store.APIKey{
		Label: "admin", Username: "admin", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		return nil, nil, err
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: emailDomain, MailFromSubdomain: emailMailFrom, DKIMToken: "benchtoken",
		Status: store.DomainVerified, TrackOpens: true, TrackClicks: true}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		return nil, nil, err
	}
	links := make([]string, trackingLinks)
	for i := range links {
		links[i] = fmt.Sprintf("https://shop.example/orders/4711?step=%d&utm_source=mail", i)
	}
	for range trackingEmails {
		id := uuid.New()
		to := make([]string, trackingRecipients)
		for i := range to {
			to[i] = fmt.Sprintf("r%d.%s@customer.example", i, id.String()[:8])
		}
		e := &store.Email{ID: id.String(), OrganizationID: org.ID, DomainID: d.ID, FromAddress: "billing@" + emailDomain,
			Subject: benchEmailRequest.Subject, Source: store.SourceAPI, TrackOpens: true, TrackClicks: true}
		if err := st.CreateEmail(ctx, e, to); err != nil {
			return nil, nil, err
		}
		if err := st.SaveEmailLinks(ctx, e.ID, links); err != nil {
			return nil, nil, err
		}
		for r := range to {
			opens = append(opens, "/t/o/"+tokens.MustMint(tracktoken.Token{Kind: tracktoken.Open, EmailID: id, Recipient: r})+".gif")
			for l := range links {
				clicks = append(clicks, "/t/c/"+tokens.MustMint(tracktoken.Token{Kind: tracktoken.Click, EmailID: id, Recipient: r, Link: l}))
			}
		}
	}
	return opens, clicks, nil
}

type engagement struct {
	openedEvents, clickedEvents         int
	openedRecipients, clickedRecipients int
}

func engagementCounts(ctx context.Context, st *store.Store) (engagement, error) {
	var c engagement
	err := st.DB.NewRaw(`SELECT
		(SELECT count(*) FROM events WHERE event_type = ?),
		(SELECT count(*) FROM events WHERE event_type = ?),
		(SELECT count(*) FROM email_recipients WHERE opened_at IS NOT NULL),
		(SELECT count(*) FROM email_recipients WHERE clicked_at IS NOT NULL)`,
		string(eventtype.Opened), string(eventtype.Clicked)).
		Scan(ctx, &c.openedEvents, &c.clickedEvents, &c.openedRecipients, &c.clickedRecipients)
	return c, err
}

// waitEvents waits until want opened and clicked events are stored.
func waitEvents(ctx context.Context, st *store.Store, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := engagementCounts(ctx, st)
		if err != nil {
			return err
		}
		if got := c.openedEvents + c.clickedEvents; got >= want {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d events stored after %s", got, want, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rateResult is one kind of request of an open-loop run.
type rateResult struct {
	requests, errors int
	p50, p99, max    time.Duration
}

func (r rateResult) String() string {
	return fmt.Sprintf("%6d requests   p50 %6.2f ms   p99 %6.2f ms   max %7.2f ms   errors %d",
		r.requests, ms(r.p50), ms(r.p99), ms(r.max), r.errors)
}

// openLoop sends rate requests per second for the duration, each at its
// scheduled time whether or not the earlier ones were answered (no
// coordinated omission: a slow answer does not delay the next request), and
// measures each from its scheduled time. next(i) names the i-th request's
// kind, URL and expected status; redirects are not followed.
func openLoop(ctx context.Context, rate int, duration time.Duration, next func(i int) (kind, url string, status int)) map[string]rateResult {
	transport := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, DisableCompression: true}
	defer transport.CloseIdleConnections()
	c := &http.Client{Transport: transport, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	type sample struct {
		kind string
		d    time.Duration
		err  bool
	}
	n := rate * int(duration/time.Millisecond) / 1000
	samples := make([]sample, n)
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		if ctx.Err() != nil {
			break
		}
		kind, url, status := next(i)
		wg.Go(func() {
			res, err := c.Get(url)
			failed := err != nil
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				failed = res.StatusCode != status
			}
			samples[i] = sample{kind, time.Since(at), failed}
		})
	}
	wg.Wait()
	byKind := map[string][]time.Duration{}
	out := map[string]rateResult{}
	for _, s := range samples {
		if s.kind == "" {
			continue
		}
		r := out[s.kind]
		r.requests++
		if s.err {
			r.errors++
		}
		out[s.kind] = r
		byKind[s.kind] = append(byKind[s.kind], s.d)
	}
	for kind, lat := range byKind {
		slices.Sort(lat)
		r := out[kind]
		r.p50, r.p99, r.max = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
		out[kind] = r
	}
	return out
}
