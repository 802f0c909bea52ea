package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v74/github"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// hookReceiver is an HTTPS receiver on loopback that checks both signatures
// with implementations written elsewhere and keeps every body by delivery id.
type hookReceiver struct {
	*httptest.Server
	secret string
	mu     sync.Mutex
	bodies map[string][]string
	bad    []string
}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	id := req.Header.Get("X-Service-Delivery-Id")
	var problem string
	if _, err := github.ValidatePayloadFromBody("application/json", bytes.NewReader(raw), req.Header.Get("X-Service-Signature"), []byte(r.secret)); err != nil {
		problem = "go-github: " + err.Error()
	} else if v, err := standardwebhooks.NewWebhook(r.secret); err != nil {
		problem = err.Error()
	} else if err := v.Verify(raw, req.Header); err != nil {
		problem = "standard webhooks: " + err.Error()
	} else if req.Header.Get("webhook-id") != id || id == "" {
		problem = "webhook-id differs from X-Service-Delivery-Id"
	}
	r.mu.Lock()
	if problem != "" {
		r.bad = append(r.bad, id+": "+problem)
	} else {
		r.bodies[id] = append(r.bodies[id], string(raw))
	}
	r.mu.Unlock()
	// A little work per request, so the worker is killed with attempts in
	// flight.
	time.Sleep(20 * time.Millisecond)
	w.WriteHeader(http.StatusNoContent)
}

// startHookReceiver starts a receiver on loopback and writes its test CA to a
// file, for the worker's SSL_CERT_FILE.
func startHookReceiver(t *testing.T) (*hookReceiver, string) {
	rcv := &hookReceiver{bodies: map[string][]string{}}
	rcv.Server = httptest.NewUnstartedServer(rcv)
	rcv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rcv.StartTLS()
	t.Cleanup(rcv.Close)
	caFile := filepath.Join(t.TempDir(), "receiver-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rcv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return rcv, caFile
}

// checkArrivals fails the test unless every delivery that arrived was signed
// correctly, had an id from want, and came again (if at all) with the same
// bytes; it returns how many arrived more than once.
func (r *hookReceiver) checkArrivals(t *testing.T, want map[string]bool) (duplicates int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		t.Fatalf("receiver refused %d requests, e.g. %s", len(r.bad), r.bad[0])
	}
	for id, bodies := range r.bodies {
		if !want[id] {
			t.Fatalf("unknown delivery id %s arrived", id)
		}
		for _, b := range bodies[1:] {
			duplicates++
			if b != bodies[0] {
				t.Fatalf("delivery %s arrived twice with different bodies", id)
			}
		}
	}
	return duplicates
}

func (r *hookReceiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

// TestWorkerKilledMidDelivery: 200 events, the worker SIGKILLed part-way,
// a new worker started; every delivery arrives with its id (a duplicate only
// with the same id and identical bytes), and no workflow history of the run
// holds the signing secret, an email address, a subject or the URL's token.
func TestWorkerKilledMidDelivery(t *testing.T) {
	heavy(t)
	const events = 200
	rcv, caFile := startHookReceiver(t)

	// The worker starts after the webhook exists, and again after the kill.
	s := startStack(t, topology{sharedTemporal: true, noWorker: true, noDNS: true, env: []string{
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		// The worker trusts the receiver's test CA the way an operator adds
		// a private CA: through Go's standard variable.
		"SSL_CERT_FILE=" + caFile,
	}})
	env, internalAddr := s.env, s.internal[0]
	testenv.WaitListening(t, internalAddr, 30*time.Second)
	st := testenv.OpenStore(t, s.databaseURL)
	org, err := st.OrganizationByName(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateDomain(context.Background(), &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "e2ewebhooktoken", Status: store.DomainVerified}, nil); err != nil {
		t.Fatal(err)
	}

	const urlToken = "url-query-token-7f3a"
	created := s.api().createWebhook(rcv.URL+"/hook?token="+urlToken, "delivered")
	rcv.secret = created.SigningSecret
	webhookID := created.Webhook.ID

	worker := testenv.Start(t, env, "worker")

	// Ingest the events from a few concurrent senders, as `mailyard events
	// emit` would, and keep the delivery ids the API answered.
	var mu sync.Mutex
	want := map[string]bool{}
	var wg sync.WaitGroup
	for sender := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := sender; i < events; i += 4 {
				for _, id := range ingest(t, internalAddr, i) {
					mu.Lock()
					want[id] = true
					mu.Unlock()
				}
			}
		}()
	}

	testenv.Eventually(t, 2*time.Minute, "a fifth of the deliveries", func() bool { return rcv.distinct() >= events/5 })
	worker.Kill()
	t.Logf("worker killed after %d deliveries arrived", rcv.distinct())
	wg.Wait()
	if len(want) != events {
		t.Fatalf("ingest answered %d delivery ids for %d events", len(want), events)
	}
	time.Sleep(time.Second)
	testenv.Start(t, env, "worker")

	testenv.Eventually(t, 3*time.Minute, "every delivery", func() bool { return rcv.distinct() >= events })
	duplicates := rcv.checkArrivals(t, want)
	t.Logf("%d deliveries arrived, %d duplicates (same id, same bytes)", events, duplicates)

	testenv.Eventually(t, time.Minute, "every delivery recorded as delivered", func() bool {
		n, err := st.DB.NewSelect().Model((*store.Delivery)(nil)).Where("webhook_id = ?", webhookID).Where("status = ?", store.DeliveryDelivered).Count(context.Background())
		return err == nil && n == events
	})

	// Operators read histories in the Temporal UI: none may hold a secret or
	// personal data. Every workflow on the server is scanned.
	forbidden := []string{rcv.secret, strings.TrimPrefix(rcv.secret, "whsec_"), "@customer.example", "Invoice", urlToken}
	var probe string
	for id := range want {
		probe = id
		break
	}
	scanned := scanHistories(t, s.temporal, probe, forbidden)
	if scanned < events {
		t.Fatalf("scanned %d histories, want at least %d", scanned, events)
	}
}

// eventBody is event i of shop.example as the sending pipeline reports it.
func eventBody(i int) []byte {
	body, _ := json.Marshal(map[string]any{
		"event_id": fmt.Sprintf("evt-%04d", i), "domain": "shop.example", "event_type": "delivered",
		"timestamp": "2026-11-21T10:00:00Z", "message_id": fmt.Sprintf("msg-%04d", i),
		"to_email": fmt.Sprintf("user%d@customer.example", i), "subject": fmt.Sprintf("Invoice %d for your order", i),
	})
	return body
}

// ingest posts event i to the internal listener and returns its delivery ids.
func ingest(t *testing.T, internalAddr string, i int) []string {
	body := eventBody(i)
	for try := 0; ; try++ {
		res, err := http.DefaultClient.Do(internalAPI(t, internalAddr).ingestRequest(body))
		if err != nil {
			t.Error(err)
			return nil
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable && try < 5 {
			time.Sleep(time.Second) // same event_id again: the documented retry
			continue
		}
		var env struct {
			Data struct {
				DeliveryIDs []string `json:"delivery_ids"`
			} `json:"data"`
		}
		if res.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &env) != nil {
			t.Errorf("ingest %d: %d %s", i, res.StatusCode, raw)
			return nil
		}
		return env.Data.DeliveryIDs
	}
}

// scanHistories reads every workflow history on the server and fails the test
// if one contains any of the forbidden strings.
// probe is a string known to be in some payload: seeing it proves the scan
// reads payload contents.
func scanHistories(t *testing.T, addr, probe string, forbidden []string) int {
	t.Helper()
	return scanHistoriesIn(t, addr, "default", probe, forbidden)
}

// scanHistoriesIn is scanHistories in another namespace.
func scanHistoriesIn(t *testing.T, addr, namespace, probe string, forbidden []string) int {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	scanned, probeSeen := 0, false
	var token []byte
	for {
		page, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 500, NextPageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Executions {
			it := c.GetWorkflowHistory(ctx, e.Execution.WorkflowId, e.Execution.RunId, false, 0)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					t.Fatal(err)
				}
				// The binary form holds payloads as they are (JSON text);
				// protojson would hide them in base64.
				raw, _ := proto.Marshal(ev)
				if hit := contains(raw, forbidden...); hit != "" {
					t.Fatalf("history of %s holds %q", e.Execution.WorkflowId, hit)
				}
				if probe != "" && bytes.Contains(raw, []byte(probe)) {
					probeSeen = true
				}
			}
			scanned++
		}
		token = page.NextPageToken
		if len(token) == 0 {
			if !probeSeen {
				t.Fatalf("the scan never saw %q: it does not read payloads", probe)
			}
			return scanned
		}
	}
}
