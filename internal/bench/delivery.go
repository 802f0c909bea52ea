package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporalclient"
	"github.com/mailyard/mailyard/internal/temporaldev"
	"github.com/mailyard/mailyard/internal/temporalserver"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/delivery"
)

const (
	saturationEvents = 2000
	latencyRate      = 20 // events per second
	latencyDuration  = 30 * time.Second
	senders          = 32
	ceilingQueue     = "bench-ceiling"
	saturationRounds = 2
	burstEvents      = 10000
	benchSecret      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// arrivals notes when each id (a webhook delivery, an email) first reached
// the local receiver.
type arrivals struct {
	mu    sync.Mutex
	first map[string]time.Time
	done  chan struct{}
	want  int
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	a.note(r.Header.Get("X-Service-Delivery-Id"), time.Now())
	w.WriteHeader(http.StatusNoContent)
}

// note records id's arrival at now, unless it arrived before.
func (a *arrivals) note(id string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.first[id]; !seen {
		a.first[id] = now
		if len(a.first) == a.want {
			close(a.done)
		}
	}
}

// expect resets the receiver for a run of n deliveries.
func (a *arrivals) expect(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.first, a.want, a.done = map[string]time.Time{}, n, make(chan struct{})
}

func (a *arrivals) wait(ctx context.Context, limit time.Duration) error {
	select {
	case <-a.done:
		return nil
	case <-time.After(limit):
		a.mu.Lock()
		defer a.mu.Unlock()
		return fmt.Errorf("only %d of %d deliveries arrived within %s", len(a.first), a.want, limit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.first)
}

func (a *arrivals) at(id string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.first[id]
}

// deliveryFigures are one server's delivery measurements.
type deliveryFigures struct {
	plain, saturation, ceiling float64 // per second
	// Ingest → receipt at latencyRate, with ordinary starts and with eager
	// workflow start (API and worker in one process, as `mailyard dev`).
	p50, p99, eagerP50, eagerP99 time.Duration
	// burstEvents at once on a separate `mailyard worker` process: how many
	// arrived, how fast, and the process's peak resident memory.
	burstDelivered int
	burstRate      float64 // per second
	workerHWM      int64   // bytes (VmHWM)
}

// benchDelivery measures end-to-end webhook delivery twice, on PostgreSQL both
// times: on a Temporal dev server (in-memory SQLite, one process) and on the
// real Temporal server with persistence and visibility in PostgreSQL, as
// production runs it. The two columns are printed side by side.
func benchDelivery(ctx context.Context, out io.Writer) error {
	fmt.Fprintln(out, "\n== webhook delivery (end to end: ingest → workflow → signed HTTPS POST) ==")
	fmt.Fprintf(out, "load average at the start: %s\n", loadAverage())
	bin, cleanup, err := buildMailyard(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	dev, prod, err := onBothServers(ctx, out, func(t temporalTarget, _ bool) (deliveryFigures, error) {
		return measureDelivery(ctx, out, t.Address, bin)
	})
	if err != nil {
		return err
	}
	row := sideBySide(out, "webhook delivery")
	row("plain signed POSTs, no Temporal", "/s", dev.plain, prod.plain)
	row("ceiling (1 workflow + 1 activity, same POST)", "/s", dev.ceiling, prod.ceiling)
	row(fmt.Sprintf("saturation, %d events at once: mailyard", saturationEvents), "/s", dev.saturation, prod.saturation)
	row("  mailyard / ceiling (goal ≥ 130)", "%", 100*dev.saturation/dev.ceiling, 100*prod.saturation/prod.ceiling)
	row(fmt.Sprintf("ingest → receipt at %d events/s, p50 (goal < 100)", latencyRate), "ms", ms(dev.p50), ms(prod.p50))
	row(fmt.Sprintf("ingest → receipt at %d events/s, p99 (goal < 200)", latencyRate), "ms", ms(dev.p99), ms(prod.p99))
	row("  with eager workflow start (API + worker in one process), p50", "ms", ms(dev.eagerP50), ms(prod.eagerP50))
	row("  with eager workflow start (API + worker in one process), p99", "ms", ms(dev.eagerP99), ms(prod.eagerP99))
	fmt.Fprintf(out, "%-62s %11d    %11d\n", fmt.Sprintf("%d events at once: delivered (goal: all)", burstEvents), dev.burstDelivered, prod.burstDelivered)
	row("  deliveries per second", "/s", dev.burstRate, prod.burstRate)
	row("  `mailyard worker` peak RSS, VmHWM (goal < 150)", "MB", mb(dev.workerHWM), mb(prod.workerHWM))
	fmt.Fprintf(out, "load average at the end: %s\n", loadAverage())
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// onBothServers runs measure on a Temporal dev server, then on the real
// Temporal server, and returns both results (dev, then real); first is set
// for the dev server's run.
func onBothServers[F any](ctx context.Context, out io.Writer, measure func(t temporalTarget, first bool) (F, error)) (dev, prod F, err error) {
	fmt.Fprintln(out, "-- on the Temporal dev server (temporal server start-dev, in memory)")
	tsrv, err := temporaldev.Start(ctx, temporaldev.Options{Headless: true})
	if err != nil {
		return dev, prod, err
	}
	dev, err = measure(temporalTarget{Address: tsrv.Address, Pid: tsrv.Pid(), MetricsURL: tsrv.MetricsURL}, true)
	tsrv.Stop()
	if err != nil {
		return dev, prod, err
	}
	fmt.Fprintln(out, "-- on the real Temporal server v1.29 (bin/temporal-server, PostgreSQL persistence and visibility, 4 history shards)")
	prod, err = withRealTemporal(ctx, func(t temporalTarget) (F, error) { return measure(t, false) })
	return dev, prod, err
}

// sideBySide prints the heading of a two-column table and returns its row
// printer: a figure on the dev server and on the real server.
func sideBySide(out io.Writer, title string) func(name, unit string, dev, prod float64) {
	fmt.Fprintf(out, "\n%-62s %14s %14s\n", title, "dev server", "real server")
	return func(name, unit string, dev, prod float64) {
		fmt.Fprintf(out, "%-62s %11.1f %-2s %11.1f %-2s\n", name, dev, unit, prod, unit)
	}
}

// withRealTemporal runs f against the real Temporal server on two throwaway
// PostgreSQL databases, stopped and dropped afterwards.
func withRealTemporal[F any](ctx context.Context, f func(temporalTarget) (F, error)) (F, error) {
	var none F
	persistence, dropPersistence, err := throwawayDatabase(ctx)
	if err != nil {
		return none, err
	}
	defer dropPersistence()
	visibility, dropVisibility, err := throwawayDatabase(ctx)
	if err != nil {
		return none, err
	}
	defer dropVisibility()
	dir, err := os.MkdirTemp("", "mailyard-bench-temporal-")
	if err != nil {
		return none, err
	}
	defer os.RemoveAll(dir)
	// More connections than the tests' default: the benchmark runs alone.
	srv, err := temporalserver.New(ctx, temporalserver.Options{Persistence: persistence, Visibility: visibility, Dir: dir, MaxConns: 10})
	if err != nil {
		return none, err
	}
	if err := srv.Start(ctx); err != nil {
		return none, err
	}
	defer srv.Stop()
	return f(temporalTarget{Address: srv.Address, Pid: srv.Pid(), MetricsURL: srv.MetricsURL})
}

// measureDelivery measures on the Temporal server at temporalAddr, with a store
// on a throwaway PostgreSQL database: saturation (2,000 events at once) beside
// a minimal one-activity workflow doing the same signed POST, latency at 20
// events/s, and plain signed POSTs without Temporal.
func measureDelivery(ctx context.Context, out io.Writer, temporalAddr, mailyardBin string) (deliveryFigures, error) {
	var fig deliveryFigures
	st, dbURL, done, err := benchStoreAt(ctx)
	if err != nil {
		return fig, err
	}
	defer done()

	rcv := &arrivals{}
	rsrv := httptest.NewUnstartedServer(rcv)
	rsrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rsrv.StartTLS()
	defer rsrv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(rsrv.Certificate())
	httpClient := webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(pool))

	key := make([]byte, 32)
	box, _ := secrets.New(key)
	// Benchmarks measure throughput, not the per-key rate limit.
	cfg, err := config.LoadFrom(func(name string) string { return map[string]string{"MAILYARD_RATE_LIMIT": "off"}[name] }, config.Need{})
	if err != nil {
		return fig, err
	}
	cfg.EncryptionKey, cfg.InternalToken, cfg.WebhookAllowPrivateNetworks = key, "bench-token", true
	if err := seedWebhook(ctx, st, box, rsrv.URL+"/hook"); err != nil {
		return fig, err
	}

	tc, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: quietSDK{}, ConnectionOptions: temporalclient.Connection()})
	if err != nil {
		return fig, err
	}
	defer tc.Close()
	w := sdkworker.New(tc, delivery.TaskQueue, worker.PollerOptions())
	worker.RegisterWebhooks(w, &activities.Webhooks{Store: st, Box: box, Client: httpClient})
	if err := w.Start(); err != nil {
		return fig, err
	}
	wRunning := true
	defer func() {
		if wRunning {
			w.Stop()
		}
	}()
	ceiling := sdkworker.New(tc, ceilingQueue, worker.PollerOptions())
	ceilingBody, _ := webhook.BuildBody("delivered", time.Now(), uuid.NewString(), "someone@customer.example", "Your receipt")
	registerCeiling(ceiling, func(ctx context.Context, id string) error {
		out := webhook.Send(ctx, httpClient, webhook.Delivery{URL: rsrv.URL + "/ceiling", Secret: benchSecret, ID: id, EventType: "delivered", Body: ceilingBody})
		if out.Verdict != webhook.Success {
			return fmt.Errorf("ceiling POST: %d %s", out.StatusCode, out.Error)
		}
		return nil
	})
	if err := ceiling.Start(); err != nil {
		return fig, err
	}
	defer ceiling.Stop()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: discard})
	internal := httptest.NewServer(a.InternalHandler())
	defer internal.Close()
	ing := newIngester(internal.URL + "/internal/v1/events")
	// The same API with eager workflow start: tc also runs the delivery
	// worker, as in `mailyard dev`.
	eager := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: discard, EagerStart: true})
	eagerInternal := httptest.NewServer(eager.InternalHandler())
	defer eagerInternal.Close()
	ingEager := newIngester(eagerInternal.URL + "/internal/v1/events")

	// Plain signed POSTs: the ceiling of the receiver and the client alone.
	rcv.expect(saturationEvents)
	fig.plain = measurePlain(ctx, httpClient, rsrv.URL+"/plain", saturationEvents)
	fmt.Fprintf(out, "plain signed POSTs (no Temporal, %d concurrent):   %8.0f /s\n", senders, fig.plain)

	// Warm up both paths so connection set-up and caches are not measured.
	if _, err := runCeiling(ctx, tc, ceilingQueue, rcv, 50); err != nil {
		return fig, err
	}
	if _, err := runSaturation(ctx, ing, rcv, 50, "warm"); err != nil {
		return fig, err
	}

	// Throughput drifts between runs on a 2-core machine, so the two are
	// measured alternately, twice, and averaged.
	for round := range saturationRounds {
		waitIdle(ctx, tc, anyRunning)
		c, err := runCeiling(ctx, tc, ceilingQueue, rcv, saturationEvents)
		if err != nil {
			return fig, err
		}
		waitIdle(ctx, tc, anyRunning)
		m, err := runSaturation(ctx, ing, rcv, saturationEvents, fmt.Sprintf("sat%d", round))
		if err != nil {
			return fig, err
		}
		fmt.Fprintf(out, "  round %d: mailyard %6.1f /s   ceiling %6.1f /s\n", round+1, m, c)
		fig.ceiling += c / saturationRounds
		fig.saturation += m / saturationRounds
	}
	fmt.Fprintf(out, "saturation, %d events at once:   mailyard %6.1f deliveries/s   ceiling (1 workflow + 1 activity, same POST) %6.1f /s   = %3.0f %% (goal ≥ 130 %%)\n",
		saturationEvents, fig.saturation, fig.ceiling, 100*fig.saturation/fig.ceiling)

	waitIdle(ctx, tc, anyRunning)
	if fig.p50, fig.p99, err = runLatency(ctx, ing, rcv); err != nil {
		return fig, err
	}
	fmt.Fprintf(out, "latency, %d events/s for %s, ingest → receipt:   p50 %4.0f ms (goal < 100)   p99 %4.0f ms (goal < 200)\n",
		latencyRate, latencyDuration, ms(fig.p50), ms(fig.p99))
	waitIdle(ctx, tc, anyRunning)
	if fig.eagerP50, fig.eagerP99, err = runLatency(ctx, ingEager, rcv); err != nil {
		return fig, err
	}
	fmt.Fprintf(out, "  the same with eager workflow start:              p50 %4.0f ms               p99 %4.0f ms\n", ms(fig.eagerP50), ms(fig.eagerP99))

	// The burst runs on a `mailyard worker` process of its own, whose peak
	// memory is read from /proc: the in-process worker stops first.
	waitIdle(ctx, tc, anyRunning)
	w.Stop()
	wRunning = false
	if err := runBurst(ctx, out, &fig, ing, rcv, mailyardBin, workerEnv{
		databaseURL: dbURL, temporal: temporalAddr, key: key, caPEM: pemOf(rsrv.Certificate()),
	}); err != nil {
		return fig, err
	}
	return fig, nil
}

func seedWebhook(ctx context.Context, st *store.Store, box *secrets.Box, url string) error {
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "bench", keyauth.WithSecret(secret, &store.APIKey{Label: "b", Username: "b", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		return err
	}
	if err := st.CreateDomain(ctx, &store.Domain{OrganizationID: org.ID, Domain: "bench.example", MailFromSubdomain: "mail.bench.example", DKIMToken: "benchtoken", Status: store.DomainVerified}, nil); err != nil {
		return err
	}
	return st.CreateWebhook(ctx, &store.Webhook{OrganizationID: org.ID, URL: url, EventTypes: store.EventTypes{"delivered"}}, 20,
		func(id int64) ([]byte, error) { return box.Seal([]byte(benchSecret), store.WebhookSecretBinding(id)) })
}

// ingester posts events to the internal listener over kept-alive connections,
// so the measurement is not of the load generator's TCP handshakes.
type ingester struct {
	url    string
	client *http.Client
}

func newIngester(url string) *ingester {
	return &ingester{url: url, client: &http.Client{Transport: &http.Transport{MaxIdleConns: senders * 2, MaxIdleConnsPerHost: senders * 2}}}
}

func (g *ingester) send(ctx context.Context, eventID string) ([]string, error) {
	body, _ := json.Marshal(map[string]any{
		"event_id": eventID, "domain": "bench.example", "event_type": "delivered", "timestamp": time.Now().UTC().Format(time.RFC3339),
		"message_id": uuid.NewString(), "to_email": "someone@customer.example", "subject": "Your receipt",
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer bench-token")
	req.Header.Set("Content-Type", "application/json")
	res, err := g.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var env struct {
		Data struct {
			DeliveryIDs []string `json:"delivery_ids"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil || res.StatusCode != http.StatusAccepted {
		return nil, fmt.Errorf("ingest answered %d (%v)", res.StatusCode, err)
	}
	return env.Data.DeliveryIDs, nil
}

// parallel runs f(i) for i < n on senders goroutines.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	next := make(chan int)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func runSaturation(ctx context.Context, ing *ingester, rcv *arrivals, n int, prefix string) (float64, error) {
	rcv.expect(n)
	run := uuid.NewString()[:8]
	start := time.Now()
	if err := parallel(n, func(i int) error {
		_, err := ing.send(ctx, fmt.Sprintf("%s-%s-%d", prefix, run, i))
		return err
	}); err != nil {
		return 0, err
	}
	if err := rcv.wait(ctx, 10*time.Minute); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func runLatency(ctx context.Context, ing *ingester, rcv *arrivals) (p50, p99 time.Duration, err error) {
	n := latencyRate * int(latencyDuration/time.Second)
	rcv.expect(n)
	type sent struct {
		at  time.Time
		ids []string
	}
	results := make([]sent, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / latencyRate)
	defer tick.Stop()
	var firstErr error
	var mu sync.Mutex
	for i := range n {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Now()
			ids, err := ing.send(ctx, fmt.Sprintf("lat-%d-%s", i, uuid.NewString()[:8]))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			results[i] = sent{at: at, ids: ids}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if err := rcv.wait(ctx, 5*time.Minute); err != nil {
		return 0, 0, err
	}
	var lat []time.Duration
	for _, r := range results {
		for _, id := range r.ids {
			lat = append(lat, rcv.at(id).Sub(r.at))
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

func measurePlain(ctx context.Context, httpClient *http.Client, url string, n int) float64 {
	body, _ := webhook.BuildBody("delivered", time.Now(), uuid.NewString(), "someone@customer.example", "Your receipt")
	start := time.Now()
	_ = parallel(n, func(int) error {
		webhook.Send(ctx, httpClient, webhook.Delivery{URL: url, Secret: benchSecret, ID: uuid.NewString(), EventType: "delivered", Body: body})
		return nil
	})
	return float64(n) / time.Since(start).Seconds()
}

// quietSDK keeps the Temporal SDK's logs out of the figures.
type quietSDK struct{}

func (quietSDK) Debug(string, ...interface{}) {}
func (quietSDK) Info(string, ...interface{})  {}
func (quietSDK) Warn(string, ...interface{})  {}
func (quietSDK) Error(string, ...interface{}) {}
