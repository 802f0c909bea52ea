package delivery_test

import (
	"context"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
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

// An attempt is a local activity, and a receiver may take up to 15 s to
// answer: longer than the 10 s workflow task timeout. The SDK keeps the
// workflow task alive meanwhile, so the slow answer counts once, as the
// first attempt, and is not made again.
func TestLocalAttemptOutlivesWorkflowTask(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	box, _ := secrets.New(make([]byte, 32))
	var requests atomic.Int32
	const answerAfter = 12 * time.Second
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		requests.Add(1)
		time.Sleep(answerAfter)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(rcv.Certificate())

	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	queue := "local-attempt-" + uuid.NewString()
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	worker.RegisterWebhooks(w, &activities.Webhooks{Store: st, Box: box,
		Client: webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(pool))})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", keyauth.WithSecret(secret, &store.APIKey{Label: "b", Username: "b", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	wh := &store.Webhook{OrganizationID: org.ID, URL: rcv.URL + "/slow", EventTypes: store.EventTypes{"delivered"}}
	sig, _ := webhook.NewSecret()
	if err := st.CreateWebhook(ctx, wh, 20, func(id int64) ([]byte, error) { return box.Seal([]byte(sig), store.WebhookSecretBinding(id)) }); err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	body, _ := webhook.BuildBody("delivered", time.Now(), uuid.NewString(), "ada@customer.example", "Receipt")
	if err := st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: org.ID, WebhookID: wh.ID, EventType: "delivered", Body: body}); err != nil {
		t.Fatal(err)
	}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: delivery.WorkflowID(id), TaskQueue: queue, WorkflowTaskTimeout: 10 * time.Second},
		delivery.WorkflowName, delivery.Input{DeliveryID: id, Schedule: []time.Duration{0, time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var res delivery.Result
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != delivery.StatusDelivered || res.Attempts != 1 || requests.Load() != 1 {
		t.Fatalf("result %+v after %d requests, want delivered on the one attempt", res, requests.Load())
	}
	// The attempt was a local activity, and its workflow task was kept alive
	// past its timeout rather than timed out and retried.
	var markers, unwanted int
	it := tc.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markers++
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			unwanted++
		}
	}
	if markers == 0 || unwanted != 0 {
		t.Fatalf("history: %d markers, %d workflow task time-outs or activity tasks", markers, unwanted)
	}
}
