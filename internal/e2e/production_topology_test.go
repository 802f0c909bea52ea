package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// TestProductionTopology runs Mailyard as production does: the real Temporal
// server (not the dev server) with persistence and visibility in PostgreSQL,
// set up with `mailyard temporal setup` (a namespace of its own, the search
// attributes), and two api, two worker and one dns process against it. Domains, webhook
// deliveries and emails go through both api processes; the Temporal server is
// stopped in the middle for about 15 seconds and started again on the same
// databases. Nothing is lost: events and emails sent during the outage are
// refused with 503 and accepted when sent again, every delivery arrives (a
// duplicate only with the same id and bytes), every email reaches its
// recipient's mail server and is announced to the webhook, a refused email
// leaves no trace, a domain whose records appear during the outage is verified
// by its own workflow's next check afterwards, and no history holds a secret or
// personal data.
func TestProductionTopology(t *testing.T) {
	heavy(t)
	const (
		events = 90 // a third before, during and after the outage
		emails = 6  // likewise
	)
	temporal := testenv.StartRealTemporal(t)
	rcv, caFile := startHookReceiver(t)
	mx := startMX(t)
	// A namespace of Mailyard's own, which `mailyard temporal setup` registers
	// with the search attributes, as an operator does on a cluster.
	s := startStack(t, topology{temporal: temporal.Address, namespace: "mailyard", apis: 2, workers: 2, env: append(mx.env(),
		// A check every 2 s; the window outlasts the test.
		"MAILYARD_VERIFY_SCHEDULE=2s/10m",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"SSL_CERT_FILE="+caFile,
	)})
	mx.route(t, s.customer)
	a, b := s.apiOn(0), s.apiOn(1)

	// A domain added through one api process, verified through the other.
	shopID, shopToken := addPendingDomain(t, a, "shop.example")
	for _, n := range []int{1, 2} {
		name := fmt.Sprintf("%s-%d.dkim.mailyard.test.", shopToken, n)
		testenv.Eventually(t, 30*time.Second, "DKIM key "+name+" from mailyard dns", func() bool { return queryTXT(t, s.dnsAddr, name) != "" })
	}
	publishCustomerRecords(t, s, shopToken, "shop.example")
	if st := b.verify(shopID).Domain.Status; st != "verified" {
		t.Fatalf("shop.example after verify: %v", st)
	}
	sendKey := a.sendKey(shopID)
	// A domain whose records appear only while Temporal is down.
	lateID, lateToken := addPendingDomain(t, b, "late.example")

	const urlToken = "url-query-token-prod-9c1d"
	created := a.createWebhook(rcv.URL+"/hook?token="+urlToken, "delivered")
	rcv.secret = created.SigningSecret
	webhookID := created.Webhook.ID
	if got := b.webhook(webhookID); got.ID != webhookID {
		t.Fatalf("the other api process does not see the webhook: %+v", got)
	}

	// Events alternate between the two api processes' internal listeners,
	// emails between their public ones; each email has a recipient of its own.
	var mu sync.Mutex
	want := map[string]bool{}     // delivery ids the ingest answered
	emailIDs := map[string]bool{} // ids of the queued emails
	var refused atomic.Int64      // 503 answers
	send := func(phase int) *sync.WaitGroup {
		var wg sync.WaitGroup
		for i := phase * events / 3; i < (phase+1)*events/3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids := ingestUntilAccepted(t, s.internal[i%2], i, &refused)
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					want[id] = true
				}
			}()
		}
		for i := phase * emails / 3; i < (phase+1)*emails/3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := sendUntilQueued(t, s.apiURLs[i%2], sendKey, i, &refused)
				mu.Lock()
				defer mu.Unlock()
				emailIDs[id] = true
			}()
		}
		return &wg
	}

	// The outage catches webhook deliveries and email attempts in flight:
	// Temporal runs an attempt whose result it never got again after its
	// heartbeat time-out (30 s), a webhook delivery after its 30 s limit.
	send(0).Wait()
	testenv.Eventually(t, 2*time.Minute, "a few deliveries before the outage", func() bool { return rcv.distinct() >= 5 })
	if n := refused.Load(); n != 0 {
		t.Fatalf("%d requests refused with Temporal up", n)
	}

	temporal.Stop()
	down := time.Now()
	mu.Lock()
	t.Logf("Temporal stopped with %d of %d deliveries arrived, %d of %d emails announced", rcv.distinct(), events/3+emails/3, rcv.announced(emailIDs), emails/3)
	mu.Unlock()
	during := send(1)
	publishCustomerRecords(t, s, lateToken, "late.example")
	testenv.Eventually(t, time.Minute, "a 503 during the outage", func() bool { return refused.Load() > 0 })
	if st := a.dnsRecords(shopID).Domain.Status; st != "verified" {
		t.Fatalf("reading a domain without Temporal: %v", st)
	}
	time.Sleep(15*time.Second - time.Since(down))
	temporal.Start()
	t.Logf("Temporal started again after %s down; %d requests refused meanwhile", time.Since(down).Round(time.Second), refused.Load())
	during.Wait()
	send(2).Wait()
	if len(want) != events || len(emailIDs) != emails {
		t.Fatalf("accepted %d of %d events and %d of %d emails", len(want), events, len(emailIDs), emails)
	}

	// Every email sent, once, to its recipient; the refused sends left none.
	for id := range emailIDs {
		testenv.Eventually(t, 2*time.Minute, "email "+id+" sent", func() bool {
			return a.as(sendKey).email(id).Status == "sent"
		})
	}
	for i := range emails {
		rcpt := fmt.Sprintf("r%d@rcpt.example", i)
		got := mx.received(rcpt)
		if len(got) == 0 {
			t.Fatalf("%s received nothing", rcpt)
		}
		for _, m := range got[1:] {
			if !bytes.Equal(m, got[0]) {
				t.Fatalf("%s received two different messages", rcpt)
			}
		}
		id := messageEmailID(got[0])
		if !emailIDs[id] {
			t.Fatalf("%s received email %q, not one the API queued", rcpt, id)
		}
	}
	if listed := a.as(sendKey).emails("?limit=100").Emails; len(listed) != emails {
		t.Fatalf("%d emails listed, %d queued: a refused send left one behind", len(listed), emails)
	}

	// Every event's delivery and every email's delivered event arrive.
	st := testenv.OpenStore(t, s.databaseURL)
	waitDeliveries(t, s, st, rcv, webhookID, events+emails)
	var all []store.Delivery
	if err := st.DB.NewSelect().Model(&all).Where("webhook_id = ?", webhookID).Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	announced := map[string]bool{}
	for _, d := range all {
		if !want[d.ID] {
			var body struct {
				Data struct {
					MessageID string `json:"message_id"`
				} `json:"data"`
			}
			if err := json.Unmarshal(d.Body, &body); err != nil || !emailIDs[body.Data.MessageID] {
				t.Fatalf("delivery %s is neither an ingested event's nor an email's: %s", d.ID, d.Body)
			}
			announced[body.Data.MessageID] = true
			want[d.ID] = true
		}
	}
	if len(all) != events+emails || len(announced) != emails {
		t.Fatalf("%d deliveries stored, want %d; %d of %d emails announced", len(all), events+emails, len(announced), emails)
	}
	duplicates := rcv.checkArrivals(t, want)
	t.Logf("%d deliveries arrived, %d duplicates (same id, same bytes)", events+emails, duplicates)
	testenv.Eventually(t, time.Minute, "every delivery recorded as delivered", func() bool {
		n, err := st.DB.NewSelect().Model((*store.Delivery)(nil)).Where("webhook_id = ?", webhookID).Where("status = ?", store.DeliveryDelivered).Count(context.Background())
		return err == nil && n == events+emails
	})

	// The late domain's onboarding workflow kept its timer through the restart:
	// a scheduled check, not a call to Verify, finds the records.
	testenv.Eventually(t, time.Minute, "late.example verified by its scheduled check", func() bool {
		return b.dnsRecords(lateID).Domain.Status == "verified"
	})

	// Visibility on PostgreSQL lists every workflow of the run; none holds a
	// secret or personal data.
	var probe string
	for id := range want {
		probe = id
		break
	}
	forbidden := []string{rcv.secret, strings.TrimPrefix(rcv.secret, "whsec_"), "@customer.example", "Invoice", urlToken, "rcpt.example", "Order confirmation"}
	if scanned := scanHistoriesIn(t, temporal.Address, s.namespace, probe, forbidden); scanned < events+emails+2 {
		t.Fatalf("scanned %d histories, want at least %d", scanned, events+emails+2)
	}
}

// addPendingDomain adds a domain through api and returns its id and DKIM token.
func addPendingDomain(t *testing.T, api *apiClient, name string) (int64, string) {
	t.Helper()
	added := api.addDomain(name, "")
	if added.Domain.Status != "pending" {
		t.Fatalf("added %s: %+v", name, added.Domain)
	}
	return added.Domain.ID, strings.TrimSuffix(added.DNSRecords[0].Value, "-1.dkim.mailyard.test")
}

// publishCustomerRecords creates, in the customer's zone, the four records
// Mailyard asks for (default MAIL FROM subdomain mail.<domain>).
func publishCustomerRecords(t *testing.T, s *stack, token, domain string) {
	t.Helper()
	s.customer.Add(t, fmt.Sprintf("%s-1._domainkey.%s. 300 IN CNAME %s-1.dkim.mailyard.test.", token, domain, token))
	s.customer.Add(t, fmt.Sprintf("%s-2._domainkey.%s. 300 IN CNAME %s-2.dkim.mailyard.test.", token, domain, token))
	s.customer.Add(t, fmt.Sprintf(`mail.%s. 300 IN TXT "v=spf1 include:spf.mailyard.test ~all"`, domain))
	s.customer.Add(t, fmt.Sprintf("mail.%s. 300 IN MX 10 bounces.mailyard.test.", domain))
}

// ingestUntilAccepted posts event i until the API accepts it, as the sending
// pipeline must: a 503 (Temporal unreachable) is counted in refused and the
// same event is sent again a second later. It gives up after three minutes.
func ingestUntilAccepted(t *testing.T, internalAddr string, i int, refused *atomic.Int64) []string {
	body := eventBody(i)
	httpClient := &http.Client{Timeout: time.Minute}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res, err := httpClient.Do(internalAPI(t, internalAddr).ingestRequest(body))
		if err != nil {
			t.Errorf("ingest %d: %v", i, err)
			return nil
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			refused.Add(1)
			time.Sleep(time.Second)
			continue
		}
		var env struct {
			Data struct {
				DeliveryIDs []string `json:"delivery_ids"`
			} `json:"data"`
		}
		if res.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &env) != nil || len(env.Data.DeliveryIDs) != 1 {
			t.Errorf("ingest %d: %d %s", i, res.StatusCode, raw)
			return nil
		}
		return env.Data.DeliveryIDs
	}
}

// sendUntilQueued sends email i (to r<i>@rcpt.example) through the API at
// apiURL until it is queued: a 503 (Temporal unreachable; nothing was kept) is
// counted in refused and the request is sent again a second later. It returns
// the email's id.
func sendUntilQueued(t *testing.T, apiURL, key string, i int, refused *atomic.Int64) string {
	body := map[string]any{
		"from": "Shop <orders@shop.example>", "to": fmt.Sprintf("r%d@rcpt.example", i),
		"subject": fmt.Sprintf("Order confirmation %d", i), "text": "Thank you for your order.",
	}
	api := clientAt(t, apiURL, key)
	httpClient := &http.Client{Timeout: time.Minute}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res, err := httpClient.Do(api.request("POST", "/api/v1/emails", body))
		if err != nil {
			t.Errorf("send email %d: %v", i, err)
			return ""
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			refused.Add(1)
			time.Sleep(time.Second)
			continue
		}
		var env struct {
			Data struct {
				Email struct {
					ID string `json:"id"`
				} `json:"email"`
			} `json:"data"`
		}
		if res.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &env) != nil || env.Data.Email.ID == "" {
			t.Errorf("send email %d: %d %s", i, res.StatusCode, raw)
			return ""
		}
		return env.Data.Email.ID
	}
}

// messageEmailID is the email id in a message's Message-ID (<id@domain>).
func messageEmailID(msg []byte) string {
	m, err := mail.ReadMessage(bytes.NewReader(msg))
	if err != nil {
		return ""
	}
	id, _, _ := strings.Cut(strings.Trim(m.Header.Get("Message-ID"), "<>"), "@")
	return id
}

// waitDeliveries waits up to four minutes for n distinct deliveries at the
// receiver; on time-out it says where the missing ones stand, in the database
// and in Temporal.
func waitDeliveries(t *testing.T, s *stack, st *store.Store, rcv *hookReceiver, webhookID int64, n int) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for rcv.distinct() < n {
		if time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var all []store.Delivery
		_ = st.DB.NewSelect().Model(&all).Where("webhook_id = ?", webhookID).Scan(context.Background())
		byStatus := map[string]int{}
		var missing []string
		rcv.mu.Lock()
		for _, d := range all {
			byStatus[d.Status]++
			if _, ok := rcv.bodies[d.ID]; !ok && len(missing) < 5 {
				missing = append(missing, d.ID)
			}
		}
		rcv.mu.Unlock()
		for _, id := range missing {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			desc, err := s.temporalC.DescribeWorkflowExecution(ctx, "webhook-delivery:"+id, "")
			cancel()
			if err != nil {
				t.Logf("missing delivery %s: %v", id, err)
			} else {
				t.Logf("missing delivery %s: workflow %v, %d pending activities", id, desc.WorkflowExecutionInfo.Status, len(desc.PendingActivities))
			}
		}
		t.Fatalf("%d of %d deliveries arrived; stored %d by status %v", rcv.distinct(), n, len(all), byStatus)
	}
}

// announced is how many of the emails have had a delivered event arrive.
func (r *hookReceiver) announced(emailIDs map[string]bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, bodies := range r.bodies {
		var body struct {
			Data struct {
				MessageID string `json:"message_id"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(bodies[0]), &body) == nil && emailIDs[body.Data.MessageID] {
			seen[body.Data.MessageID] = true
		}
	}
	return len(seen)
}
