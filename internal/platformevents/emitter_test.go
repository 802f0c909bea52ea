package platformevents_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/platformevents"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/delivery"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const secret = "whsec_dGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQ="

// posts is what an HTTPS receiver on loopback got, by path, after checking
// the Standard Webhooks signature with the reference library.
type posts struct {
	mu  sync.Mutex
	got map[string][]string
	bad []string
}

func (p *posts) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.got[path])
}

func (p *posts) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.got {
		n += len(v)
	}
	return n
}

type fixture struct {
	st      *store.Store
	emitter *platformevents.Emitter
	runs    *deliveryruns.Runs
	box     *secrets.Box
	rcv     *posts
	url     string
	org     int64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{st: testenv.OpenStore(t, testenv.PostgresURL(t)), rcv: &posts{got: map[string][]string{}}}
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.rcv.mu.Lock()
		defer f.rcv.mu.Unlock()
		if err := verifier.Verify(body, r.Header); err != nil {
			f.rcv.bad = append(f.rcv.bad, err.Error())
		}
		f.rcv.got[r.URL.Path] = append(f.rcv.got[r.URL.Path], string(body))
		switch {
		case strings.HasPrefix(r.URL.Path, "/gone"):
			w.WriteHeader(http.StatusGone)
		case strings.HasPrefix(r.URL.Path, "/failing"):
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.url = srv.URL
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	if f.box, err = secrets.New(bytes.Repeat([]byte{7}, 32)); err != nil {
		t.Fatal(err)
	}

	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	runs := &deliveryruns.Runs{Temporal: tc, Schedule: []time.Duration{0, time.Second}}
	f.emitter = &platformevents.Emitter{Store: f.st, Runs: runs}
	w := sdkworker.New(tc, delivery.TaskQueue, sdkworker.Options{})
	f.runs = runs
	worker.RegisterWebhooks(w, &activities.Webhooks{Store: f.st, Box: f.box, Events: f.emitter, DisableAfter: time.Millisecond,
		Client: webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(pool))})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	f.org = f.newOrg(t, "acme")
	return f
}

func (f *fixture) newOrg(t *testing.T, name string) int64 {
	t.Helper()
	org, err := f.st.CreateOrganizationWithKey(context.Background(), name,
		&store.APIKey{Label: "k", Username: "u-" + name, Prefix: "p", Digest: []byte("d-" + name), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	return org.ID
}

func (f *fixture) newWebhook(t *testing.T, org int64, path string, types ...eventtype.Type) *store.Webhook {
	t.Helper()
	w := &store.Webhook{OrganizationID: org, URL: f.url + path, EventTypes: eventtype.Strings(types)}
	if err := f.st.CreateWebhook(context.Background(), w, 20, func(id int64) ([]byte, error) {
		return f.box.Seal([]byte(secret), store.WebhookSecretBinding(id))
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (f *fixture) deliveriesOf(t *testing.T, webhookID int64) []store.Delivery {
	t.Helper()
	ds, _, err := f.st.ListDeliveries(context.Background(), webhookID, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestEmitDeliversToSubscribedEnabledWebhooksOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	subscribed := f.newWebhook(t, f.org, "/subscribed", eventtype.Delivered, eventtype.WebhookDisabled)
	alsoSubscribed := f.newWebhook(t, f.org, "/also", eventtype.WebhookDisabled)
	unsubscribed := f.newWebhook(t, f.org, "/unsubscribed", eventtype.Delivered, eventtype.DomainVerified)
	disabled := f.newWebhook(t, f.org, "/disabled", eventtype.WebhookDisabled)
	if _, err := f.st.DB.NewUpdate().Model((*store.Webhook)(nil)).Set("status = ?", store.WebhookDisabled).
		Where("id = ?", disabled.ID).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	except := f.newWebhook(t, f.org, "/except", eventtype.WebhookDisabled)
	foreign := f.newWebhook(t, f.newOrg(t, "other"), "/foreign", eventtype.WebhookDisabled)

	ev := platformevents.Event{
		Key: "webhook.disabled:test:1", Type: eventtype.WebhookDisabled, OrganizationID: f.org,
		OccurredAt:      time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC),
		Data:            map[string]any{"webhook_id": except.ID, "reason": "manual"},
		ExceptWebhookID: except.ID,
	}
	if err := f.emitter.Emit(ctx, ev); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "both subscribed webhooks receive the event", func() bool {
		return f.rcv.count("/subscribed") == 1 && f.rcv.count("/also") == 1
	})
	want := `{"event_type":"webhook.disabled","timestamp":"2026-11-23T09:00:00Z","data":{"reason":"manual","webhook_id":` +
		itoa(except.ID) + `}}`
	if got := f.rcv.got["/subscribed"][0]; got != want {
		t.Fatalf("body\n%s\nwant\n%s", got, want)
	}
	if len(f.rcv.bad) > 0 {
		t.Fatalf("signatures rejected: %v", f.rcv.bad)
	}
	for _, w := range []*store.Webhook{subscribed, alsoSubscribed} {
		ds := f.deliveriesOf(t, w.ID)
		if len(ds) != 1 || ds[0].PlatformEventID == nil || ds[0].EventType != "webhook.disabled" {
			t.Fatalf("deliveries of %s: %+v", w.URL, ds)
		}
		testenv.Eventually(t, 10*time.Second, "delivered status", func() bool {
			return f.deliveriesOf(t, w.ID)[0].Status == store.DeliveryDelivered
		})
	}
	for _, w := range []*store.Webhook{unsubscribed, disabled, except, foreign} {
		if ds := f.deliveriesOf(t, w.ID); len(ds) != 0 {
			t.Fatalf("%s got %d deliveries", w.URL, len(ds))
		}
	}

	// The same key again (a retried activity): nothing new is stored or sent,
	// and the finished workflows are not started again.
	if err := f.emitter.Emit(ctx, ev); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if n := f.rcv.total(); n != 2 {
		t.Fatalf("%d posts after emitting the same key twice", n)
	}
	if len(f.deliveriesOf(t, subscribed.ID)) != 1 {
		t.Fatal("second delivery stored")
	}
}

// A crash between storing the event and starting its workflows leaves
// pending deliveries; emitting again starts them, once.
func TestEmitAgainStartsMissingWorkflows(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.newWebhook(t, f.org, "/hook", eventtype.DomainVerified)
	ev := platformevents.Event{Key: "domain.verified:9:1", Type: eventtype.DomainVerified, OrganizationID: f.org,
		Data: map[string]any{"domain_id": 9, "domain": "example.com", "status": "verified"}}
	if _, err := f.emitter.Stage(ctx, f.st.DB, ev); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if f.rcv.total() != 0 {
		t.Fatal("staged event sent before it was started")
	}
	for range 2 {
		if err := f.emitter.Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the event arrives", func() bool { return f.rcv.count("/hook") == 1 })
	time.Sleep(time.Second)
	if n := f.rcv.total(); n != 1 || !strings.Contains(f.rcv.got["/hook"][0], `"event_type":"domain.verified"`) {
		t.Fatalf("%d posts: %v", n, f.rcv.got)
	}
}

func TestEmitRefusesEmailEventsAndMissingKeys(t *testing.T) {
	f := &platformevents.Emitter{}
	for _, ev := range []platformevents.Event{
		{Key: "x", Type: eventtype.Delivered, Data: map[string]any{}},
		{Type: eventtype.DomainVerified, Data: map[string]any{}},
		{Key: "y", Type: "nope", Data: map[string]any{}},
	} {
		if _, err := f.Stage(context.Background(), nil, ev); err == nil {
			t.Errorf("%+v accepted", ev)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Every automatic disable (410: receiver_gone; a delivery out of retries
// after the failure clock: failing) announces webhook.disabled once to the
// organization's other subscribed webhooks, never to the disabled one.
func TestAutomaticDisablesAnnounceOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	watcher := f.newWebhook(t, f.org, "/watcher", eventtype.WebhookDisabled)
	for _, c := range []struct{ path, reason string }{{"/gone", "receiver_gone"}, {"/failing", "failing"}} {
		hook := f.newWebhook(t, f.org, c.path, eventtype.Delivered, eventtype.WebhookDisabled)
		id, _ := deliveryruns.NewDeliveryID()
		if err := f.st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: f.org, WebhookID: hook.ID, EventType: "delivered", Body: []byte(`{"event_type":"delivered"}`)}); err != nil {
			t.Fatal(err)
		}
		if err := f.runs.StartFirst(ctx, []string{id}); err != nil {
			t.Fatal(err)
		}
		want := `"data":{"webhook_id":` + itoa(hook.ID) + `,"reason":"` + c.reason + `"}`
		testenv.Eventually(t, 30*time.Second, c.reason+" announced", func() bool {
			f.rcv.mu.Lock()
			defer f.rcv.mu.Unlock()
			for _, b := range f.rcv.got["/watcher"] {
				if strings.Contains(b, want) {
					return true
				}
			}
			return false
		})
		got, err := f.st.WebhookInOrganization(ctx, f.org, hook.ID)
		if err != nil || got.Status != store.WebhookDisabled || *got.DisabledReason != c.reason {
			t.Fatalf("%s: %+v %v", c.path, got, err)
		}
	}
	time.Sleep(time.Second)
	f.rcv.mu.Lock()
	defer f.rcv.mu.Unlock()
	if n := len(f.rcv.got["/watcher"]); n != 2 {
		t.Fatalf("watcher got %d events: %v", n, f.rcv.got["/watcher"])
	}
	for _, p := range []string{"/gone", "/failing"} {
		for _, b := range f.rcv.got[p] {
			if strings.Contains(b, "webhook.disabled") {
				t.Fatalf("%s was told of its own disable", p)
			}
		}
	}
	if ds := f.deliveriesOf(t, watcher.ID); len(ds) != 2 {
		t.Fatalf("watcher has %d deliveries", len(ds))
	}
}
