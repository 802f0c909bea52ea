package api_test

import (
	"crypto/x509"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v74/github"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// received is one POST as the receiver saw it, after checking both
// signatures with implementations written elsewhere: go-github for
// X-Service-Signature and the Standard Webhooks library for webhook-*.
type received struct {
	Path     string
	Header   http.Header
	Body     string
	SigError string
}

// receiver is an HTTPS endpoint on loopback with its own test CA. Each path
// answers with the statuses queued for it (the last one repeats; 200 when
// none are queued).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	secrets  map[string]string // path → signing secret
	answers  map[string][]int
	got      []received
	pool     *x509.CertPool
	extraHdr map[int]http.Header
	bodies   map[int][]byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{secrets: map[string]string{}, answers: map[string][]int{}, extraHdr: map[int]http.Header{}, bodies: map[int][]byte{}}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.Config.ErrorLog = log.New(io.Discard, "", 0)
	r.StartTLS()
	t.Cleanup(r.Close)
	r.pool = x509.NewCertPool()
	r.pool.AddCert(r.Certificate())
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	secret := r.secrets[req.URL.Path]
	r.mu.Unlock()
	rec := received{Path: req.URL.Path, Header: req.Header.Clone(), Body: string(raw)}
	if _, err := github.ValidatePayloadFromBody(req.Header.Get("Content-Type"), strings.NewReader(string(raw)), req.Header.Get("X-Service-Signature"), []byte(secret)); err != nil {
		rec.SigError = "go-github: " + err.Error()
	} else if v, err := standardwebhooks.NewWebhook(secret); err != nil {
		rec.SigError = "standard webhooks: " + err.Error()
	} else if err := v.Verify(raw, req.Header); err != nil {
		rec.SigError = "standard webhooks: " + err.Error()
	}
	r.mu.Lock()
	r.got = append(r.got, rec)
	status := http.StatusOK
	if q := r.answers[req.URL.Path]; len(q) > 0 {
		status = q[0]
		if len(q) > 1 {
			r.answers[req.URL.Path] = q[1:]
		}
	}
	for k, v := range r.extraHdr[status] {
		w.Header()[k] = v
	}
	body, custom := r.bodies[status]
	r.mu.Unlock()
	w.WriteHeader(status)
	if custom {
		_, _ = w.Write(body)
		return
	}
	_, _ = io.WriteString(w, "thanks from "+req.URL.Path)
}

// expect registers a path's secret and its answers.
func (r *receiver) expect(path, secret string, statuses ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secrets[path] = secret
	r.answers[path] = statuses
}

// requests returns what arrived for a delivery id.
func (r *receiver) requests(deliveryID string) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, g := range r.got {
		if g.Header.Get("X-Service-Delivery-Id") == deliveryID {
			out = append(out, g)
		}
	}
	return out
}

func (r *receiver) waitFor(t *testing.T, deliveryID string, n int) []received {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "delivery "+deliveryID, func() bool { return len(r.requests(deliveryID)) >= n })
	got := r.requests(deliveryID)
	for _, g := range got {
		if g.SigError != "" {
			t.Fatalf("receiver rejected the signature of %s: %s", deliveryID, g.SigError)
		}
	}
	return got
}

// startDeliveryWorker runs the webhook worker of this harness with a client
// that trusts the receiver's CA, and lets webhooks point at loopback.
func (h *harness) startDeliveryWorker(rcv *receiver) {
	h.t.Helper()
	h.cfg.WebhookAllowPrivateNetworks = true
	box, err := secrets.New(h.cfg.EncryptionKey)
	if err != nil {
		h.t.Fatal(err)
	}
	w := sdkworker.New(h.temporal, delivery.TaskQueue, sdkworker.Options{})
	worker.RegisterWebhooks(w, &activities.Webhooks{
		Store: h.store, Box: box,
		Client: webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(rcv.pool)),
		Events: worker.NewEmitter(h.store, h.temporal, discardLogger()),
	})
	worker.RegisterRecovery(w, &activities.Recovery{Store: h.store, Runs: &deliveryruns.Runs{Temporal: h.temporal}})
	if err := w.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(w.Stop)
}

// internal serves the internal listener's handler for the test.
func (h *harness) internal() *httptest.Server {
	srv := httptest.NewServer(h.api.InternalHandler())
	h.t.Cleanup(srv.Close)
	return srv
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func httpServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
