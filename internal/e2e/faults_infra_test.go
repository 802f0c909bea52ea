package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
)

// The infrastructure faults of the fault suite (README, "Failures Mailyard
// survives"): Temporal or PostgreSQL goes away in the middle of a run of
// webhook deliveries and emails, and comes back. Each case ends with nothing
// lost and nothing sent twice, except with the same id and identical bytes.

// TestFaultTemporalOutage stops the real Temporal server (on PostgreSQL) for
// 20 seconds in the middle of 500 webhook deliveries and 20 emails. While it
// is down, ingest and Send email answer 503 in the error format, a refused
// email leaves no row behind, and the test sends the refused ones again.
// After the server is back every event reaches the webhook receiver, every
// email reaches its recipient's mail server (a duplicate only with identical
// bytes), and each recipient is announced exactly once.
func TestFaultTemporalOutage(t *testing.T) {
	heavy(t)
	const (
		events = 500
		emails = 20
		outage = 20 * time.Second
	)
	temporal := testenv.StartRealTemporal(t)
	rcv, caFile := startHookReceiver(t)
	mx := startMX(t)
	s := startStack(t, topology{temporal: temporal.Address, apis: 1, workers: 1, env: infraFaultEnv(mx, caFile)})
	l := startInfraLoad(t, s, rcv, mx, events, emails)

	// The server stops with the first third's deliveries in flight and an
	// email attempt waiting for the mail server's answer.
	first := l.send(0)
	l.waitInFlight()
	if n := l.refused.Load(); n != 0 {
		t.Fatalf("%d requests refused with Temporal up", n)
	}
	temporal.Stop()
	down := time.Now()
	// The held email's worker learns it was delivered, and cannot tell Temporal.
	l.release()
	accepted, queued := l.accepted()
	t.Logf("Temporal stopped: %d deliveries arrived, %d events and %d emails accepted", rcv.distinct(), accepted, queued)
	during := l.send(1)

	// What a client sees meanwhile: 503 in the error format, once the
	// Temporal client has given up retrying (its RPC time-out, 10 s).
	probeUnavailable(t, "ingest", l.ingestRequest(events/3), 30*time.Second)
	probeUnavailable(t, "send email", l.sendRequest("probe@rcpt.example"), 30*time.Second)
	l.probeReadiness("temporal", "database")
	// Reading needs the database only.
	if got := s.api().as(l.sendKey).emails("?limit=1").Emails; len(got) == 0 {
		t.Fatal("listing emails without Temporal shows none")
	}
	testenv.Eventually(t, time.Minute, "senders refused during the outage", func() bool { return l.refused.Load() >= 5 })
	time.Sleep(outage - time.Since(down))
	temporal.Start()
	t.Logf("Temporal started again after %s down; %d requests refused meanwhile", time.Since(down).Round(time.Second), l.refused.Load())

	first.Wait()
	during.Wait()
	l.send(2).Wait()
	l.check()
}

// infraFaultEnv is what the stack of an infrastructure fault case needs: the
// recipients' mail server, the webhook receiver's CA, and a rate limit no
// resending client reaches.
func infraFaultEnv(mx *mxServer, caFile string) []string {
	return append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"SSL_CERT_FILE="+caFile,
		"MAILYARD_RATE_LIMIT=100000/s",
	)
}

// infraLoad is a run of webhook deliveries and emails through a stack: events
// ingested at the internal listener for a webhook of the organization, and
// emails, one recipient each (r<i>@rcpt.example), sent with a send key.
type infraLoad struct {
	t              *testing.T
	s              *stack
	rcv            *hookReceiver
	mx             *mxServer
	sendKey        string
	webhookID      int64
	events, emails int

	// held is closed when the mail server holds the answer to the third
	// message it kept, until release: an email attempt in flight that the
	// fault catches.
	held    chan struct{}
	release func()

	mu       sync.Mutex
	want     map[string]bool // delivery ids the ingest answered
	emailIDs map[string]bool // ids of the queued emails
	refused  atomic.Int64    // 503 answers
}

// startInfraLoad verifies shop.example, creates its send key and a webhook
// for delivered and bounced events at rcv, and routes rcpt.example to mx,
// which holds its answer to the third message until l.release.
func startInfraLoad(t *testing.T, s *stack, rcv *hookReceiver, mx *mxServer, events, emails int) *infraLoad {
	t.Helper()
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	domainID, _, _ := verifiedDomain(t, s, "shop.example")
	l := &infraLoad{t: t, s: s, rcv: rcv, mx: mx, events: events, emails: emails, want: map[string]bool{}, emailIDs: map[string]bool{}}
	l.held = make(chan struct{})
	released := make(chan struct{})
	var once sync.Once
	l.release = func() { once.Do(func() { close(released) }) }
	t.Cleanup(l.release)
	mx.beforeAnswer = func(kept int) {
		if kept == 3 {
			close(l.held)
			<-released
		}
	}
	api := s.api()
	l.sendKey = api.sendKey(domainID)
	created := api.createWebhook(rcv.URL+"/hook", "delivered", "bounced")
	rcv.secret = created.SigningSecret
	l.webhookID = created.Webhook.ID
	return l
}

// waitInFlight waits until the fault can catch work in flight: deliveries
// have begun to arrive and an email attempt waits for the mail server's
// answer.
func (l *infraLoad) waitInFlight() {
	l.t.Helper()
	testenv.Eventually(l.t, 2*time.Minute, "the first deliveries and a held email", func() bool {
		select {
		case <-l.held:
			return l.rcv.distinct() >= 30
		default:
			return false
		}
	})
}

// send ingests the phase-th third of the events (ten at a time, each sent
// again after a 503 until it is accepted) and sends the phase-th third of the
// emails (likewise); the group is done when all are accepted.
func (l *infraLoad) send(phase int) *sync.WaitGroup {
	var wg sync.WaitGroup
	var next atomic.Int64
	first, end := int64(phase*l.events/3), int64((phase+1)*l.events/3)
	next.Store(first)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < end; i = next.Add(1) - 1 {
				ids := ingestUntilAccepted(l.t, l.s.internal[0], int(i), &l.refused)
				l.mu.Lock()
				for _, id := range ids {
					l.want[id] = true
				}
				l.mu.Unlock()
			}
		}()
	}
	for i := phase * l.emails / 3; i < (phase+1)*l.emails/3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := sendUntilQueued(l.t, l.s.apiURL, l.sendKey, i, &l.refused)
			l.mu.Lock()
			l.emailIDs[id] = true
			l.mu.Unlock()
		}()
	}
	return &wg
}

// accepted is how many events and emails were accepted so far.
func (l *infraLoad) accepted() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.want), len(l.emailIDs)
}

// ingestRequest is event i's ingest request.
func (l *infraLoad) ingestRequest(i int) *http.Request {
	return internalAPI(l.t, l.s.internal[0]).ingestRequest(eventBody(i))
}

// sendRequest is a Send email request to rcpt with the send key.
func (l *infraLoad) sendRequest(rcpt string) *http.Request {
	return l.s.api().as(l.sendKey).request("POST", "/api/v1/emails", map[string]any{"from": "orders@shop.example", "to": rcpt, "subject": "Probe", "text": "Probe."})
}

// probeUnavailable sends req and fails the test unless the answer is a 503
// in the error format, code unavailable, within limit: a client must learn
// to retry, not hang or read a 500. It returns the answer's body.
func probeUnavailable(t *testing.T, what string, req *http.Request, limit time.Duration) []byte {
	t.Helper()
	start := time.Now()
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	took := time.Since(start)
	var env struct {
		Status string `json:"status"`
		Error  struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if res.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(raw, &env) != nil || env.Status != "error" || env.Error.Code != "unavailable" || env.Error.Message == "" {
		t.Fatalf("%s during the outage: %d %s, want 503 with code unavailable", what, res.StatusCode, raw)
	}
	if took > limit {
		t.Fatalf("%s during the outage took %s to answer", what, took.Round(time.Millisecond))
	}
	t.Logf("%s during the outage: 503 in %s: %s", what, took.Round(time.Millisecond), env.Error.Message)
	return raw
}

// probeReadiness checks that GET /readyz names the dependency that is down,
// and only it.
func (l *infraLoad) probeReadiness(down, up string) {
	l.t.Helper()
	raw := probeUnavailable(l.t, "readyz", l.s.api().request("GET", "/readyz", nil), 30*time.Second)
	if !bytes.Contains(raw, []byte(`"location":"`+down+`"`)) || bytes.Contains(raw, []byte(`"location":"`+up+`"`)) {
		l.t.Fatalf("readyz with %s down and %s up: %s", down, up, raw)
	}
}

// check waits for the run to settle and fails the test unless nothing was
// lost and nothing sent twice except with the same id and identical bytes:
// every email sent to its recipient (identical bytes if more than once),
// none left behind by a refused send, every delivery arrived and recorded
// delivered, and exactly one delivered event per email's recipient.
func (l *infraLoad) check() {
	t, s, rcv := l.t, l.s, l.rcv
	t.Helper()
	if t.Failed() {
		t.FailNow()
	}
	if len(l.want) != l.events || len(l.emailIDs) != l.emails {
		t.Fatalf("accepted %d of %d events and %d of %d emails", len(l.want), l.events, len(l.emailIDs), l.emails)
	}
	if got := s.api().readyz(); got != "ok" {
		t.Fatalf("readyz after the fault: %v", got)
	}

	for id := range l.emailIDs {
		testenv.Eventually(t, 3*time.Minute, "email "+id+" sent", func() bool {
			return s.api().as(l.sendKey).email(id).Status == "sent"
		})
	}
	resent := 0
	for i := range l.emails {
		rcpt := fmt.Sprintf("r%d@rcpt.example", i)
		got := l.mx.received(rcpt)
		if len(got) == 0 {
			t.Fatalf("%s received nothing", rcpt)
		}
		for _, m := range got[1:] {
			resent++
			if !bytes.Equal(m, got[0]) {
				t.Fatalf("%s received two different messages", rcpt)
			}
		}
		if id := messageEmailID(got[0]); !l.emailIDs[id] {
			t.Fatalf("%s received email %q, not one the API queued", rcpt, id)
		}
	}
	if n := len(l.mx.received("probe@rcpt.example")); n != 0 {
		t.Fatalf("a refused probe email was sent %d times", n)
	}
	listed := s.api().as(l.sendKey).emails("?limit=100").Emails
	for _, e := range listed {
		if id := e.ID; !l.emailIDs[id] {
			t.Fatalf("email %s is listed but was never queued: a refused send left it behind", id)
		}
	}
	if len(listed) != l.emails {
		t.Fatalf("%d emails listed, %d queued", len(listed), l.emails)
	}

	st := testenv.OpenStore(t, s.databaseURL)
	waitDeliveries(t, s, st, rcv, l.webhookID, l.events+l.emails)
	var all []store.Delivery
	if err := st.DB.NewSelect().Model(&all).Where("webhook_id = ?", l.webhookID).Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every stored delivery is an ingested event's or an email's outcome.
	known := map[string]bool{}
	byEmail := map[string]string{} // email id → the delivery id of its outcome event
	for _, d := range all {
		known[d.ID] = true
		if l.want[d.ID] {
			continue
		}
		var body struct {
			EventType string `json:"event_type"`
			Data      struct {
				MessageID string `json:"message_id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(d.Body, &body); err != nil || !l.emailIDs[body.Data.MessageID] {
			t.Fatalf("delivery %s is neither an ingested event's nor an email's: %s", d.ID, d.Body)
		}
		if body.EventType != "delivered" {
			t.Fatalf("email %s: %s event", body.Data.MessageID, body.EventType)
		}
		if other, dup := byEmail[body.Data.MessageID]; dup {
			t.Fatalf("email %s announced twice, by deliveries %s and %s", body.Data.MessageID, other, d.ID)
		}
		byEmail[body.Data.MessageID] = d.ID
	}
	if len(all) != l.events+l.emails || len(byEmail) != l.emails {
		t.Fatalf("%d deliveries stored, want %d; %d of %d emails announced", len(all), l.events+l.emails, len(byEmail), l.emails)
	}
	duplicates := rcv.checkArrivals(t, known)
	testenv.Eventually(t, time.Minute, "every delivery recorded as delivered", func() bool {
		n, err := st.DB.NewSelect().Model((*store.Delivery)(nil)).Where("webhook_id = ?", l.webhookID).Where("status = ?", store.DeliveryDelivered).Count(context.Background())
		return err == nil && n == int64(l.events+l.emails)
	})
	// Every delivery's workflow ended: no activity is left retrying.
	testenv.Eventually(t, time.Minute, "every delivery workflow completed", func() bool {
		for _, d := range all {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			desc, err := s.temporalC.DescribeWorkflowExecution(ctx, delivery.WorkflowID(d.ID), "")
			cancel()
			if err != nil || desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				return false
			}
		}
		return true
	})
	t.Logf("%d deliveries arrived, %d duplicates (same id, same bytes); %d emails sent, %d sent again (same bytes); %d requests refused with 503",
		len(all), duplicates, l.emails, resent, l.refused.Load())
}

// TestFaultPostgresRestart restarts Mailyard's PostgreSQL (a server of the
// test's own) for 15 seconds in the middle of 500 webhook deliveries and 20
// emails; Temporal stays up. While the database is down every API answer is a
// 503 in the error format (ingest, Send email, a read), at once; the test sends
// the refused ones again. Afterwards, without any Mailyard process restarted,
// the workers' activities retry until they succeed: every event reaches the
// webhook receiver, every email its recipient's mail server (a duplicate only
// with identical bytes), and each recipient is announced exactly once.
func TestFaultPostgresRestart(t *testing.T) {
	heavy(t)
	const (
		events = 500
		emails = 20
		outage = 15 * time.Second
	)
	pg := testenv.StartPostgres(t)
	rcv, caFile := startHookReceiver(t)
	mx := startMX(t)
	s := startStack(t, topology{database: pg.URL, env: infraFaultEnv(mx, caFile)})
	processes := map[string]*testenv.Process{"api": s.apiProc, "worker": s.worker, "dns": s.dns}
	l := startInfraLoad(t, s, rcv, mx, events, emails)

	first := l.send(0)
	l.waitInFlight()
	if n := l.refused.Load(); n != 0 {
		t.Fatalf("%d requests refused with the database up", n)
	}
	pg.Stop()
	down := time.Now()
	// The held email's worker learns it was delivered, and cannot record it.
	l.release()
	accepted, queued := l.accepted()
	t.Logf("PostgreSQL stopped: %d deliveries arrived, %d events and %d emails accepted", rcv.distinct(), accepted, queued)
	during := l.send(1)

	// At once: a refused connection is not retried.
	probeUnavailable(t, "ingest", l.ingestRequest(events/3), 5*time.Second)
	probeUnavailable(t, "send email", l.sendRequest("probe@rcpt.example"), 5*time.Second)
	probeUnavailable(t, "list emails", s.api().as(l.sendKey).request("GET", "/api/v1/emails", nil), 5*time.Second)
	l.probeReadiness("database", "temporal")
	testenv.Eventually(t, time.Minute, "senders refused during the outage", func() bool { return l.refused.Load() >= 5 })
	time.Sleep(outage - time.Since(down))
	pg.Start()
	t.Logf("PostgreSQL started again after %s down; %d requests refused meanwhile", time.Since(down).Round(time.Second), l.refused.Load())

	first.Wait()
	during.Wait()
	l.send(2).Wait()
	l.check()
	for name, p := range processes {
		if p.Exited() {
			t.Fatalf("mailyard %s exited (%d) during the run", name, p.ExitCode())
		}
	}
}
