package delivery_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/delivery"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scriptedReceiver answers each request with the next status of its script.
type scriptedReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	script map[string][]int
}

func (r *scriptedReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	status := 200
	if q := r.script[req.URL.Path]; len(q) > 0 {
		status, r.script[req.URL.Path] = q[0], q[1:]
	}
	r.mu.Unlock()
	if status == 429 {
		w.Header().Set("Retry-After", "2")
	}
	w.WriteHeader(status)
}

// recordedVersion names the histories TestRecordHistories writes: v1 are
// runs of regular-activity attempts, v2 of local-activity attempts (the
// "local-attempt" change), v3 the same with the version in the input
// instead of its marker. Older files stay: running deliveries of every
// version must replay.
const recordedVersion = "v3"

// TestRecordHistories runs each scenario on the dev server with the real
// activity, PostgreSQL and an HTTPS receiver, and writes its history into
// testdata/ for the replay tests. It runs only when asked to
// (MAILYARD_RECORD_HISTORIES=1), after a deliberate, versioned change.
//
// With MAILYARD_RECORD_RARE=before (on the code before a change that only
// some runs meet) or =after (on the code with it), it records instead the
// rare scenarios, as webhook-delivery-rare-<before|after>-*.json.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("MAILYARD_RECORD_HISTORIES") != "1" {
		t.Skip("set MAILYARD_RECORD_HISTORIES=1 to record replay histories")
	}
	rare := os.Getenv("MAILYARD_RECORD_RARE")
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	box, _ := secrets.New(make([]byte, 32))
	rcv := &scriptedReceiver{script: map[string][]int{}}
	rcv.Server = httptest.NewUnstartedServer(rcv)
	rcv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rcv.StartTLS()
	defer rcv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(rcv.Certificate())

	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	w := sdkworker.New(tc, delivery.TaskQueue, sdkworker.Options{})
	acts := &activities.Webhooks{Store: st, Box: box,
		Client: webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(pool))}
	worker.RegisterWebhooks(w, acts)
	// The attempts of the deliveries in failLocal fail their local tries,
	// as they would with the database down, and work as the regular
	// activity they go on as.
	var failLocal sync.Map
	w.RegisterActivityWithOptions(func(ctx context.Context, in delivery.AttemptInput) (delivery.AttemptResult, error) {
		if _, fail := failLocal.Load(in.DeliveryID); fail && activity.GetInfo(ctx).IsLocalActivity {
			return delivery.AttemptResult{}, errors.New("the database is down")
		}
		return acts.Attempt(ctx, in)
	}, activity.RegisterOptions{Name: delivery.AttemptActivity, DisableAlreadyRegisteredCheck: true})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", keyauth.WithSecret(secret, &store.APIKey{Label: "b", Username: "b", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	short := []time.Duration{0, time.Second, time.Second, time.Second}
	type scenario struct {
		name     string
		script   []int
		schedule []time.Duration
		during   func(webhookID int64)
		// failLocal fails the local tries of every attempt.
		failLocal bool
		// sealedElsewhere seals the webhook's secret under another key,
		// which the attempt cannot decrypt; the run may end with an error.
		sealedElsewhere bool
	}
	scenarios := []scenario{
		{name: "delivered", script: []int{204}},
		{name: "retried-then-delivered", script: []int{500, 429, 302, 200}, schedule: short},
		{name: "receiver-gone", script: []int{503, 410}, schedule: short},
		// Each attempt fails its local tries and goes on as a regular
		// activity (local-step-fallback).
		{name: "local-attempt-failed", script: []int{500, 200}, schedule: short, failLocal: true},
		{name: "exhausted", script: []int{500, 500, 500, 500}, schedule: short},
		{name: "webhook-deleted", script: []int{500}, schedule: []time.Duration{0, 3 * time.Second},
			during: func(id int64) {
				time.Sleep(time.Second)
				if _, _, err := st.DeleteWebhook(ctx, org.ID, id); err != nil {
					t.Error(err)
				}
			}},
	}
	if rare != "" {
		// The webhook's signing secret cannot be decrypted: the local
		// attempt's non-retryable error (non-retryable-ends-local-step).
		scenarios = []scenario{{name: "secret-unreadable", script: []int{204}, sealedElsewhere: true}}
	}
	other, _ := secrets.New(bytes.Repeat([]byte{9}, 32))
	for _, sc := range scenarios {
		path := "/" + sc.name
		rcv.script[path] = sc.script
		wh := &store.Webhook{OrganizationID: org.ID, URL: rcv.URL + path, EventTypes: store.EventTypes{"delivered"}}
		sig, _ := webhook.NewSecret()
		sealer := box
		if sc.sealedElsewhere {
			sealer = other
		}
		if err := st.CreateWebhook(ctx, wh, 20, func(id int64) ([]byte, error) { return sealer.Seal([]byte(sig), store.WebhookSecretBinding(id)) }); err != nil {
			t.Fatal(err)
		}
		id, _ := uuid.NewV7()
		body, _ := webhook.BuildBody("delivered", time.Now(), uuid.NewString(), "ada@customer.example", "Receipt")
		if err := st.CreateDelivery(ctx, &store.Delivery{ID: id.String(), OrganizationID: org.ID, WebhookID: wh.ID, EventType: "delivered", Body: body}); err != nil {
			t.Fatal(err)
		}
		if sc.failLocal {
			failLocal.Store(id.String(), true)
		}
		starting := delivery.Starting{DeliveryID: id.String(), OrganizationID: org.ID, WebhookID: wh.ID}
		if err := delivery.Start(ctx, tc, starting, delivery.Input{DeliveryID: id.String(), Schedule: sc.schedule}); err != nil {
			t.Fatal(err)
		}
		run := tc.GetWorkflow(ctx, delivery.WorkflowID(id.String()), "")
		if sc.during != nil {
			sc.during(wh.ID)
		}
		var res delivery.Result
		if err := run.Get(ctx, &res); err != nil && !sc.sealedElsewhere {
			t.Fatalf("%s: %v", sc.name, err)
		}
		t.Logf("%s: %+v", sc.name, res)
		file := fmt.Sprintf("webhook-delivery-%s-%s.json", recordedVersion, sc.name)
		if rare != "" {
			file = fmt.Sprintf("webhook-delivery-rare-%s-%s.json", rare, sc.name)
		}
		testenv.WriteHistory(t, tc, run, filepath.Join("testdata", file))
	}
}
