package recovery_test

import (
	"context"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/webhook"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/delivery"
	"github.com/mailyard/mailyard/workflows/recovery"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestRecordHistories runs recoveries on the dev server with the real
// activities, PostgreSQL and an HTTPS receiver, and writes their histories
// into testdata/ for the replay tests. It runs only when asked to
// (MAILYARD_RECORD_HISTORIES=1), after a deliberate, versioned change.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("MAILYARD_RECORD_HISTORIES") != "1" {
		t.Skip("set MAILYARD_RECORD_HISTORIES=1 to record replay histories")
	}
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	box, _ := secrets.New(make([]byte, 32))
	rcv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
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
	runs := &deliveryruns.Runs{Temporal: tc}
	w := sdkworker.New(tc, delivery.TaskQueue, sdkworker.Options{})
	worker.RegisterWebhooks(w, &activities.Webhooks{Store: st, Box: box,
		Client: webhook.NewClient(webhook.Policy{AllowPrivateNetworks: true}, webhook.WithRootCAs(pool))})
	worker.RegisterRecovery(w, &activities.Recovery{Store: st, Runs: runs})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	org, err := st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "b", Username: "b", Prefix: "p", Digest: []byte("d"), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []struct {
		name    string
		failed  int
		disable bool
	}{
		{name: "three-failed", failed: 3},
		{name: "webhook-disabled", failed: 2, disable: true},
	} {
		wh := &store.Webhook{OrganizationID: org.ID, URL: rcv.URL + "/" + sc.name, EventTypes: store.EventTypes{"delivered"}}
		sig, _ := webhook.NewSecret()
		if err := st.CreateWebhook(ctx, wh, 20, func(id int64) ([]byte, error) { return box.Seal([]byte(sig), store.WebhookSecretBinding(id)) }); err != nil {
			t.Fatal(err)
		}
		since := time.Now().Add(-time.Minute)
		for range sc.failed {
			id, _ := deliveryruns.NewDeliveryID()
			body, _ := webhook.BuildBody("delivered", time.Now(), uuid.NewString(), "ada@customer.example", "Receipt")
			if err := st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: org.ID, WebhookID: wh.ID, EventType: "delivered", Body: body, Status: store.DeliveryFailed}); err != nil {
				t.Fatal(err)
			}
		}
		if sc.disable {
			off := store.WebhookDisabled
			if _, _, _, err := st.UpdateWebhook(ctx, org.ID, wh.ID, store.WebhookPatch{Status: &off}, nil); err != nil {
				t.Fatal(err)
			}
		}
		rid := uuid.NewString()
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: recovery.WorkflowID(wh.ID, rid), TaskQueue: recovery.TaskQueue},
			recovery.WorkflowName, recovery.Input{WebhookID: wh.ID, RecoveryID: rid, Since: since.UTC(), Until: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		var res recovery.Result
		if err := run.Get(ctx, &res); err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		t.Logf("%s: %+v", sc.name, res)
		testenv.WriteHistory(t, tc, run, filepath.Join("testdata", "webhook-recovery-v1-"+sc.name+".json"))
	}
}
