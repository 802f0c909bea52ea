package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/verification"
	"github.com/mailyard/mailyard/worker"
)

// finalsReceiver is a webhook receiver that keeps every email event with
// the delivery id it came with.
type finalsReceiver struct {
	mu         sync.Mutex
	byID       map[string][][]byte            // delivery id → bodies received
	recipients map[string]map[string]struct{} // message_id + " " + to_email → delivery ids
	types      map[string]string              // delivery id → event type
}

func newFinalsReceiver() *finalsReceiver {
	return &finalsReceiver{byID: map[string][][]byte{}, recipients: map[string]map[string]struct{}{}, types: map[string]string{}}
}

func (r *finalsReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var ev struct {
		EventType string `json:"event_type"`
		Data      struct {
			MessageID string `json:"message_id"`
			ToEmail   string `json:"to_email"`
		} `json:"data"`
	}
	if err != nil || json.Unmarshal(body, &ev) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id := req.Header.Get("webhook-id")
	key := ev.Data.MessageID + " " + ev.Data.ToEmail
	r.mu.Lock()
	r.byID[id] = append(r.byID[id], body)
	if r.recipients[key] == nil {
		r.recipients[key] = map[string]struct{}{}
	}
	r.recipients[key][id] = struct{}{}
	r.types[id] = ev.EventType
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *finalsReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recipients)
}

// A worker killed in the middle of a stream of emails, some of them half
// sent, and a new worker started: every recipient gets the message; a
// recipient sent to twice gets the same bytes (and so the same Message-ID);
// each recipient is announced once, delivered; every email ends sent and the
// statistics count each recipient once.
func TestWorkerKilledMidEmails(t *testing.T) {
	heavy(t)
	const emails, killAt = 100, 20
	mx := startMX(t)
	s := startStack(t, topology{env: append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		// A hundred sends and a hundred reads in a few seconds.
		"MAILYARD_RATE_LIMIT=100000/s",
	)})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	rcv := newFinalsReceiver()
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	api := s.api()
	api.createWebhook(hook.URL+"/hooks", "delivered", "bounced")
	id, _, _ := verifiedDomain(t, s, "shop.example")
	sender := api.as(api.sendKey(id))

	// The server takes 20 to 50 ms over each message, so that several are
	// in flight at any time; the killAt-th message is kept but its 250
	// waits for the kill: the worker never learns it was delivered.
	killNow, killed := make(chan struct{}), make(chan struct{})
	var closeKilled sync.Once
	t.Cleanup(func() { closeKilled.Do(func() { close(killed) }) })
	mx.beforeAnswer = func(kept int) {
		if kept == killAt {
			close(killNow)
			<-killed
			return
		}
		time.Sleep(20*time.Millisecond + rand.N(30*time.Millisecond))
	}
	arrivedAtKill, killedAt := -1, time.Time{}
	kill := func() {
		s.worker.Kill()
		killedAt = time.Now()
		mx.mu.Lock()
		arrivedAtKill = mx.kept
		mx.mu.Unlock()
		closeKilled.Do(func() { close(killed) })
		s.worker = s.startWorker()
	}

	recipients := map[string]string{} // address → email id
	var ids []string
	for i := range emails {
		if arrivedAtKill < 0 {
			select {
			case <-killNow:
				kill()
			default:
			}
		}
		to := fmt.Sprintf("r%d@rcpt.example", i)
		body := map[string]any{"from": "billing@shop.example", "to": to, "subject": fmt.Sprintf("Order %d", i), "text": "Thank you."}
		if i%2 == 0 {
			body["cc"] = fmt.Sprintf("c%d@rcpt.example", i)
		}
		emailID := sender.send(body).ID
		ids = append(ids, emailID)
		recipients[to] = emailID
		if cc, ok := body["cc"].(string); ok {
			recipients[cc] = emailID
		}
	}
	if arrivedAtKill < 0 {
		select {
		case <-killNow:
			kill()
		case <-time.After(2 * time.Minute):
			t.Fatalf("fewer than %d messages arrived", killAt)
		}
	}
	t.Logf("worker killed after %d of %d messages arrived", arrivedAtKill, emails)

	// Every email ends sent. An attempt the dead worker had started is
	// retried once Temporal notices the worker is gone.
	st := testenv.OpenStore(t, s.databaseURL)
	ctx := context.Background()
	testenv.Eventually(t, 3*time.Minute, "every email sent", func() bool {
		var unsent int
		if err := st.DB.NewRaw("SELECT count(*) FROM emails WHERE status <> 'sent'").Scan(ctx, &unsent); err != nil {
			t.Fatal(err)
		}
		return unsent == 0
	})
	t.Logf("every email sent %s after the kill", time.Since(killedAt).Round(time.Second))
	for _, emailID := range ids {
		e := sender.email(emailID)
		if e.Status != "sent" {
			t.Fatalf("email %+v", e)
		}
		for _, r := range e.Recipients {
			if r.Status != "delivered" {
				t.Fatalf("email %s: recipient %+v", emailID, r)
			}
		}
	}

	// Every recipient got the message; one sent to again got the very same
	// bytes.
	duplicates := 0
	for addr, emailID := range recipients {
		got := mx.received(addr)
		if len(got) == 0 {
			t.Fatalf("%s received nothing", addr)
		}
		if !bytes.Contains(got[0], []byte("Message-ID: <"+emailID+"@shop.example>")) {
			t.Fatalf("%s received a message without the Message-ID of email %s", addr, emailID)
		}
		for _, again := range got[1:] {
			duplicates++
			if !bytes.Equal(again, got[0]) {
				t.Fatalf("%s received %d copies, not all the same bytes", addr, len(got))
			}
		}
	}
	// At least the recipients of the message whose answer the dead worker
	// never read received it twice.
	if duplicates == 0 {
		t.Fatal("no recipient received a message twice: the kill did not land mid-attempt")
	}
	t.Logf("%d recipients received the message twice", duplicates)

	// One final event per recipient: delivered, with one delivery id (a
	// delivery may be repeated, with its id and bytes).
	testenv.Eventually(t, 2*time.Minute, "an event for every recipient", func() bool { return rcv.count() >= len(recipients) })
	time.Sleep(2 * time.Second) // an event announced twice would arrive by now
	rcv.mu.Lock()
	if len(rcv.recipients) != len(recipients) {
		t.Fatalf("events for %d recipients, want %d", len(rcv.recipients), len(recipients))
	}
	for addr, emailID := range recipients {
		deliveries := rcv.recipients[emailID+" "+addr]
		if len(deliveries) != 1 {
			t.Fatalf("%s announced by %d deliveries", addr, len(deliveries))
		}
		for d := range deliveries {
			if rcv.types[d] != "delivered" {
				t.Fatalf("%s: %s event", addr, rcv.types[d])
			}
			for _, body := range rcv.byID[d][1:] {
				if !bytes.Equal(body, rcv.byID[d][0]) {
					t.Fatalf("delivery %s repeated with other bytes", d)
				}
			}
		}
	}
	rcv.mu.Unlock()

	stats := api.statsOn(today())
	n := int64(len(recipients))
	for counter, got := range map[string][2]int64{"accepted": {stats.Accepted, n}, "delivered": {stats.Delivered, n}, "bounced": {stats.Bounced, 0}, "deferred": {stats.Deferred, 0}} {
		if got[0] != got[1] {
			t.Fatalf("stats %s = %d, want %d (%+v)", counter, got[0], got[1], stats)
		}
	}
}

// runInProcess runs the api and the worker in the test process (for
// startStack's topology.inProcess): the API then starts emails on schedule,
// which no environment variable can shorten.
func (s *stack) runInProcess(schedule []time.Duration) {
	t := s.t
	t.Helper()
	vars := map[string]string{}
	for _, kv := range s.env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	cfg, err := config.LoadFrom(func(name string) string { return vars[name] }, config.NeedAPI)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	output := &testenv.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(output, nil))
	tc, err := client.Dial(client.Options{HostPort: cfg.TemporalAddress, Logger: tlog.NewStructuredLogger(logger)})
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := verification.New(st, cfg.DNSResolver, cfg.SPFHost, cfg.BounceHost)
	if err != nil {
		t.Fatal(err)
	}
	box, err := secrets.New(cfg.EncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: logger, Verifier: verifier, EmailSchedule: schedule})
	l, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	workerDone := make(chan error, 1)
	go srv.Run(ctx)
	go func() { _ = hs.Serve(l) }()
	go func() {
		workerDone <- worker.Run(ctx, worker.Deps{Config: cfg, Client: tc, Store: st, Box: box, Logger: logger})
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		cancel()
		if err := <-workerDone; err != nil {
			t.Errorf("worker: %v", err)
		}
		tc.Close()
		_ = st.Close()
		if t.Failed() {
			t.Logf("output of the api and the worker:\n%s", output.String())
		}
	})
}

// An email's content and signed message are erased once the retention time
// after its last attempt is over; the envelope stays. An email still
// deferred when its domain is deleted is not sent again: its next attempt
// bounces the pending recipient (soft, not suppressed) with reason
// domain_deleted. An email whose run an operator cancels while its
// recipient is deferred is erased at once, and stays queued.
func TestEmailRetentionAndDomainDeletion(t *testing.T) {
	t.Parallel()
	mx := startMX(t)
	const retention = 3 * time.Second
	s := startStack(t, topology{
		inProcess: []time.Duration{0, 3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second},
		env: append(mx.env(),
			"MAILYARD_VERIFY_SCHEDULE=1s/60s",
			"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
			"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
			"MAILYARD_EMAIL_RETENTION="+retention.String(),
		),
	})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	rcv := &eventReceiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	api := s.api()
	api.createWebhook(hook.URL+"/hooks", "delivered", "bounced")
	domainID, _, _ := verifiedDomain(t, s, "shop.example")
	sender := api.as(api.sendKey(domainID))
	send := func(to string) string {
		return sender.send(map[string]any{
			"from": "billing@shop.example", "to": to, "subject": "Invoice", "text": "Thank you.",
		}).ID
	}
	email := api.email
	delivered, deferred, canceled := send("ok@rcpt.example"), send("defer@rcpt.example"), send("defer-canceled@rcpt.example")

	// Domain deletion: the first attempts are made (one delivered, two
	// deferred); an operator cancels one deferred email's run, and the
	// domain is deleted before the next attempts.
	testenv.Eventually(t, 30*time.Second, "first attempts", func() bool {
		return email(delivered).Status == "sent" && email(deferred).Recipients[0].Status == "deferred" &&
			email(canceled).Recipients[0].Status == "deferred"
	})
	ctx := context.Background()
	if err := s.temporalC.CancelWorkflow(ctx, "email-delivery:"+canceled, ""); err != nil {
		t.Fatal(err)
	}
	st := testenv.OpenStore(t, s.databaseURL)
	var canceledRow struct {
		Content  []byte     `bun:"content"`
		ErasedAt *time.Time `bun:"erased_at"`
	}
	testenv.Eventually(t, 30*time.Second, "the canceled run's email erased", func() bool {
		if err := st.DB.NewRaw("SELECT content, erased_at FROM emails WHERE id = ?", canceled).Scan(ctx, &canceledRow); err != nil {
			t.Fatal(err)
		}
		return canceledRow.ErasedAt != nil
	})
	if e := email(canceled); canceledRow.Content != nil || e.Status != "queued" || e.Recipients[0].Status != "deferred" || e.Recipients[0].Attempts != 1 {
		t.Fatalf("email of the canceled run: content %d bytes, %+v", len(canceledRow.Content), e)
	}
	api.deleteDomain(domainID)
	testenv.Eventually(t, 30*time.Second, "email of the deleted domain ends", func() bool { return email(deferred).Status == "sent" })
	r := email(deferred).Recipients[0]
	if r.Status != "bounced" || r.Attempts != 1 || r.LastResponse == nil || *r.LastResponse != "not sent: domain_deleted" {
		t.Fatalf("recipient of the deleted domain's email: %+v", r)
	}
	mx.mu.Lock()
	tries := mx.rcpts["defer@rcpt.example"]
	mx.mu.Unlock()
	if tries != 1 {
		t.Fatalf("defer@ was contacted %d times, once before the deletion", tries)
	}

	// Retention: each email is erased once the retention time after its
	// last attempt is over, not before.
	for _, id := range []string{delivered, deferred} {
		var row struct {
			Content       []byte     `bun:"content"`
			SignedMessage []byte     `bun:"signed_message"`
			SentAt        *time.Time `bun:"sent_at"`
			ErasedAt      *time.Time `bun:"erased_at"`
		}
		testenv.Eventually(t, 30*time.Second, "email erased", func() bool {
			err := st.DB.NewRaw("SELECT content, signed_message, sent_at, erased_at FROM emails WHERE id = ?", id).Scan(ctx, &row)
			if err != nil {
				t.Fatal(err)
			}
			return row.ErasedAt != nil
		})
		if row.Content != nil || row.SignedMessage != nil || row.SentAt == nil {
			t.Fatalf("erased email: content %d bytes, signed message %d bytes, sent at %v", len(row.Content), len(row.SignedMessage), row.SentAt)
		}
		if kept := row.ErasedAt.Sub(*row.SentAt); kept < retention {
			t.Fatalf("erased %s after it was sent, retention %s", kept, retention)
		}
	}
	if len(mx.received("ok@rcpt.example")) != 1 {
		t.Fatal("the erased email was not delivered once")
	}
	e := email(delivered)
	if e.Status != "sent" || e.Subject != "Invoice" || e.Recipients[0].Status != "delivered" {
		t.Fatalf("the envelope of an erased email: %+v", e)
	}

	testenv.Eventually(t, 30*time.Second, "two events", func() bool { return len(rcv.all()) >= 2 })
	time.Sleep(time.Second) // a third would be a duplicate
	events := rcv.all()
	if len(events) != 2 {
		t.Fatalf("%d events: %v", len(events), events)
	}
	for _, ev := range events {
		data := ev["data"].(map[string]any)
		switch data["message_id"] {
		case delivered:
			if ev["event_type"] != "delivered" {
				t.Fatalf("event %v", ev)
			}
		case deferred:
			if ev["event_type"] != "bounced" || data["reason"] != "domain_deleted" || data["bounce_type"] != "soft" || data["to_email"] != "defer@rcpt.example" {
				t.Fatalf("event %v", ev)
			}
		default:
			t.Fatalf("event %v", ev)
		}
	}
	// Nothing was wrong with the address: it is not suppressed.
	if sups := api.suppressions(); len(sups) != 0 {
		t.Fatalf("suppressions %v", sups)
	}
}
