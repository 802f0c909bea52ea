package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/testenv"
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
	const emails, killAt = 100, 20
	mx := startMX(t)
	s := startStack(t,
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_SMTP_PORT="+mx.port(),
		"MAILYARD_SMTP_HELO=mailyard.e2e.example",
		"MAILYARD_SMTP_ALLOW_PRIVATE_NETWORKS=true",
		"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		// A hundred sends and a hundred reads in a few seconds.
		"MAILYARD_RATE_LIMIT=100000/s",
	)
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	s.customer.Add(t, "rcpt.example. 300 IN MX 10 mx.rcpt.example.")
	s.customer.Add(t, "mx.rcpt.example. 300 IN A 127.0.0.1")
	rcv := newFinalsReceiver()
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	s.call("POST", "/api/v1/webhooks", map[string]any{"url": hook.URL + "/hooks", "event_types": []string{"delivered", "bounced"}}, 201)
	id, _, _ := verifiedDomain(t, s, "shop.example")
	sendKey := s.call("POST", "/api/v1/credentials", map[string]any{"sending_domain_id": id, "label": "app", "permissions": []string{"send"}}, 201)["secret_key"].(string)

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
		s.worker = testenv.Start(t, s.env, "worker")
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
		emailID := s.callAs(sendKey, "POST", "/api/v1/emails", body, 202)["email"].(map[string]any)["id"].(string)
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
		e := s.callAs(sendKey, "GET", "/api/v1/emails/"+emailID, nil, 200)["email"].(map[string]any)
		if e["status"] != "sent" {
			t.Fatalf("email %v", e)
		}
		for _, r := range e["recipients"].([]any) {
			if r := r.(map[string]any); r["status"] != "delivered" {
				t.Fatalf("email %s: recipient %v", emailID, r)
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

	today := time.Now().UTC().Format("2006-01-02")
	stats := s.call("GET", "/api/v1/stats?start="+today+"&end="+today, nil, 200)["totals"].(map[string]any)
	n := float64(len(recipients))
	for counter, want := range map[string]float64{"accepted": n, "delivered": n, "bounced": 0, "deferred": 0} {
		if stats[counter] != want {
			t.Fatalf("stats %s = %v, want %v (%v)", counter, stats[counter], want, stats)
		}
	}
}
