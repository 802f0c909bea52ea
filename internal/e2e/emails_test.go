package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
	"github.com/emersion/go-smtp"
	"github.com/miekg/dns"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/mailyard/mailyard/internal/testenv"
)

// mxServer is the recipients' mail server: a real SMTP server on loopback.
// A recipient whose local part starts with "reject" is refused with 550;
// one starting with "later" gets 451 the first time, then 250; one starting
// with "defer" gets 451 every time. It keeps every message it accepts, by
// recipient.
type mxServer struct {
	*smtp.Server
	mu       sync.Mutex
	rcpts    map[string]int
	messages map[string][][]byte
	froms    []string
	senderOf map[string]string // the envelope sender of each recipient's last message
	kept     int               // messages kept so far
	// beforeAnswer, when set before the first connection, runs after a
	// message is kept and before the 250 that acknowledges it, with the
	// number of messages kept so far: a slow server, or one whose answer
	// the sender never reads.
	beforeAnswer func(kept int)
}

func startMX(t *testing.T) *mxServer {
	t.Helper()
	mx := &mxServer{rcpts: map[string]int{}, messages: map[string][][]byte{}, senderOf: map[string]string{}}
	mx.Server = smtp.NewServer(mx)
	mx.Domain = "mx.rcpt.example"
	mx.ReadTimeout, mx.WriteTimeout = 30*time.Second, 30*time.Second
	mx.Addr = testenv.ServeSMTP(t, mx.Server)
	return mx
}

func (mx *mxServer) port() string {
	_, port, _ := net.SplitHostPort(mx.Server.Addr)
	return port
}

// env points the worker's MX transport at the server: its port, and the
// loopback address the dial-time guard refuses unless told otherwise.
func (mx *mxServer) env() []string {
	return []string{
		"MAILYARD_SMTP_PORT=" + mx.port(),
		"MAILYARD_SMTP_HELO=mailyard.e2e.example",
		"MAILYARD_SMTP_ALLOW_PRIVATE_NETWORKS=true",
	}
}

// route publishes rcpt.example's MX record, naming the server, in the zone
// the stack resolves through.
func (mx *mxServer) route(t *testing.T, zone *testenv.DNSZone) {
	t.Helper()
	zone.Add(t, "rcpt.example. 300 IN MX 10 mx.rcpt.example.")
	zone.Add(t, "mx.rcpt.example. 300 IN A 127.0.0.1")
}

// NewSession implements smtp.Backend.
func (mx *mxServer) NewSession(*smtp.Conn) (smtp.Session, error) { return &mxSession{mx: mx}, nil }

type mxSession struct {
	mx   *mxServer
	from string
	to   []string
}

func (s *mxSession) Mail(from string, _ *smtp.MailOptions) error { s.from = from; return nil }

func (s *mxSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.mx.mu.Lock()
	defer s.mx.mu.Unlock()
	s.mx.rcpts[to]++
	switch {
	case strings.HasPrefix(to, "reject"):
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}
	case strings.HasPrefix(to, "later") && s.mx.rcpts[to] == 1, strings.HasPrefix(to, "defer"):
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 7, 1}, Message: "greylisted, try again later"}
	}
	s.to = append(s.to, to)
	return nil
}

func (s *mxSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.mx.mu.Lock()
	s.mx.froms = append(s.mx.froms, s.from)
	for _, to := range s.to {
		s.mx.messages[to] = append(s.mx.messages[to], b)
		s.mx.senderOf[to] = s.from
	}
	s.mx.kept++
	kept := s.mx.kept
	s.mx.mu.Unlock()
	if s.mx.beforeAnswer != nil {
		s.mx.beforeAnswer(kept)
	}
	return nil
}

func (s *mxSession) Reset()        { s.from, s.to = "", nil }
func (s *mxSession) Logout() error { return nil }

func (mx *mxServer) received(rcpt string) [][]byte {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	return mx.messages[rcpt]
}

// eventReceiver keeps the email events a webhook gets.
type eventReceiver struct {
	mu     sync.Mutex
	events []map[string]any
}

func (r *eventReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var ev map[string]any
	if err := json.NewDecoder(req.Body).Decode(&ev); err == nil {
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *eventReceiver) all() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.events...)
}

// The whole sending path through the real processes: a verified domain, a
// send key, a POST, a DKIM-signed message at the recipients' mail server
// (found through an MX record in real DNS), per-recipient outcomes (250,
// 451 then 250, 550), delivered and bounced webhooks, the suppression list,
// the day's statistics, and no address or subject in any workflow history.
// The signature verifies against the key `mailyard dns` serves through the
// customer's CNAME, before and after a DKIM rotation.
func TestSendEmailEndToEnd(t *testing.T) {
	t.Parallel()
	mx := startMX(t)
	s := startStack(t, topology{env: append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_DKIM_RECHECK=1s",
		// The schedule's second step in seconds, not the default minute.
		"MAILYARD_TEST_EMAIL_SCHEDULE=0s,3s,3s",
		"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
	)})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)

	rcv := &eventReceiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	api := s.api()
	api.createWebhook(hook.URL+"/hooks", "delivered", "bounced")

	id, sel1, _ := verifiedDomain(t, s, "shop.example")
	sender := api.as(api.sendKey(id))

	const subject = "Your invoice 42 — Ünïcode"
	queued := sender.send(map[string]any{
		"from":    "Shop Billing <billing@shop.example>",
		"to":      []string{"ok@rcpt.example", "Reject Me <reject@rcpt.example>"},
		"cc":      "later@rcpt.example",
		"bcc":     []string{"hidden@rcpt.example"},
		"subject": subject,
		"text":    "Thank you for your order.",
		"html":    "<p>Thank you for your <b>order</b>.</p>",
		"headers": map[string]string{"X-Order": "42"},
		"attachments": []map[string]string{
			{"filename": "invoice.txt", "content": "SW52b2ljZSA0Mgo=", "content_type": "text/plain"},
		},
	})
	emailID := queued.ID
	if queued.Status != "queued" {
		t.Fatalf("queued answer %+v", queued)
	}

	// The 451 is retried on the schedule's second step (3 s ±20 %).
	var got Email
	testenv.Eventually(t, time.Minute, "email sent", func() bool {
		got = sender.email(emailID)
		return got.Status == "sent"
	})
	want := map[string]struct {
		status   string
		attempts int
	}{
		"ok@rcpt.example": {"delivered", 1}, "reject@rcpt.example": {"bounced", 1},
		"later@rcpt.example": {"delivered", 2}, "hidden@rcpt.example": {"delivered", 1},
	}
	for _, r := range got.Recipients {
		w, ok := want[r.Email]
		if !ok || r.Status != w.status || r.Attempts != w.attempts {
			t.Fatalf("recipient %+v, want %+v", r, w)
		}
		delete(want, r.Email)
	}
	if len(want) != 0 || got.Subject != subject || got.From != "Shop Billing <billing@shop.example>" {
		t.Fatalf("email %+v (missing recipients %v)", got, want)
	}

	// Every delivered recipient got the same bytes: one message, signed once.
	msg := mx.received("ok@rcpt.example")
	if len(msg) != 1 {
		t.Fatalf("ok@ received %d messages", len(msg))
	}
	signed := msg[0]
	for _, rcpt := range []string{"later@rcpt.example", "hidden@rcpt.example"} {
		if m := mx.received(rcpt); len(m) != 1 || !bytes.Equal(m[0], signed) {
			t.Fatalf("%s received %d messages, or other bytes", rcpt, len(m))
		}
	}
	if len(mx.received("reject@rcpt.example")) != 0 {
		t.Fatal("a refused recipient received the message")
	}
	for _, needle := range []string{"hidden@", "Bcc:"} {
		if bytes.Contains(signed, []byte(needle)) {
			t.Fatalf("the message shows %q", needle)
		}
	}
	if !bytes.Contains(signed, []byte("Message-ID: <"+emailID+"@shop.example>")) {
		t.Fatal("Message-ID is not <email_id@domain>")
	}
	// Each recipient has a tagged return path of its own: only Mailyard
	// can name the address bounces come back to, and a recipient sees no
	// other's (docs/inbound.md).
	tagged := regexp.MustCompile(`^bounces\+` + emailID + `\.[0-9]{1,3}\.[a-z2-7]{8}@mail\.shop\.example$`)
	if len(mx.froms) != len(slices.Compact(slices.Sorted(slices.Values(mx.froms)))) {
		t.Fatalf("recipients share an envelope sender: %q", mx.froms)
	}
	for _, from := range mx.froms {
		if !tagged.MatchString(from) {
			t.Fatalf("envelope sender %q", from)
		}
	}
	assertDKIM(t, s, signed, "shop.example", sel1)

	// One event per recipient: delivered ×3, bounced (hard, 550) ×1.
	testenv.Eventually(t, 30*time.Second, "four email events", func() bool { return len(rcv.all()) >= 4 })
	time.Sleep(time.Second) // a fifth would be a duplicate
	events := rcv.all()
	if len(events) != 4 {
		t.Fatalf("%d events: %v", len(events), events)
	}
	for _, ev := range events {
		data := ev["data"].(map[string]any)
		if data["message_id"] != emailID || data["subject"] != subject {
			t.Fatalf("event %v", ev)
		}
		bounced := data["to_email"] == "reject@rcpt.example"
		if bounced != (ev["event_type"] == "bounced") || bounced && (data["bounce_type"] != "hard" || data["smtp_code"] != float64(550)) {
			t.Fatalf("event %v", ev)
		}
	}

	// The hard bounce is suppressed: the next email sends nothing to it.
	sups := api.suppressions()
	if len(sups) != 1 || sups[0].Email != "reject@rcpt.example" || sups[0].Reason != "hard_bounce" {
		t.Fatalf("suppressions %+v", sups)
	}
	second := sender.send(map[string]any{
		"from": "billing@shop.example", "to": "reject@rcpt.example", "subject": "Again", "text": "Hello again.",
	}).ID
	testenv.Eventually(t, 30*time.Second, "second email sent", func() bool {
		got = sender.email(second)
		return got.Status == "sent"
	})
	if r := got.Recipients[0]; r.Status != "suppressed" || r.Attempts != 0 {
		t.Fatalf("suppressed recipient %+v", r)
	}
	mx.mu.Lock()
	rejectTries := mx.rcpts["reject@rcpt.example"]
	mx.mu.Unlock()
	if rejectTries != 1 {
		t.Fatalf("the suppressed address was tried %d times", rejectTries)
	}
	testenv.Eventually(t, 30*time.Second, "suppressed event", func() bool { return len(rcv.all()) == 5 })
	if data := rcv.all()[4]["data"].(map[string]any); data["bounce_type"] != "suppressed" || data["message_id"] != second {
		t.Fatalf("suppressed event %v", data)
	}

	// The day's statistics, per recipient.
	stats := api.statsOn(today())
	for counter, n := range map[string][2]int64{"accepted": {stats.Accepted, 5}, "delivered": {stats.Delivered, 3}, "bounced": {stats.Bounced, 2}, "deferred": {stats.Deferred, 1}} {
		if n[0] != n[1] {
			t.Fatalf("stats %s = %d, want %d (%+v)", counter, n[0], n[1], stats)
		}
	}

	// Mail signed before a rotation still verifies after it: the old
	// selector keeps its key for the retain time.
	api.rotate(id)
	testenv.Eventually(t, 60*time.Second, "rotated", func() bool {
		return api.domain(id).DKIM.ActiveSelector != sel1
	})
	assertDKIM(t, s, signed, "shop.example", sel1)

	// An operator lists the domain's workflows by search attribute.
	list, err := s.temporalC.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("MailyardDomainId = %d", id)})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range list.Executions {
		listed[e.Execution.WorkflowId] = true
	}
	for _, wf := range []string{"email-delivery:" + emailID, "email-delivery:" + second, fmt.Sprintf("domain-onboarding:%d", id), fmt.Sprintf("dkim-rotation:%d", id)} {
		if !listed[wf] {
			t.Fatalf("MailyardDomainId = %d does not list %s (it lists %v)", id, wf, listed)
		}
	}

	// Operators see ids and counts in the histories, never an address, the
	// subject or the body.
	scanHistories(t, s.temporal, emailID, []string{"rcpt.example", "billing@", "invoice 42", "Thank you"})
}

// verifiedDomain adds a domain, creates the customer's records (the DKIM
// CNAMEs resolve into `mailyard dns` through the zone's forward) and waits
// for verification. It returns the domain's id and its two selectors.
func verifiedDomain(t *testing.T, s *stack, name string) (int64, string, string) {
	t.Helper()
	api := s.api()
	added := api.addDomain(name, "")
	id := added.Domain.ID
	token := strings.TrimSuffix(added.DNSRecords[0].Value, "-1.dkim.mailyard.test")
	sel1, sel2 := token+"-1", token+"-2"
	s.customer.Add(t, sel1+"._domainkey."+name+". 300 IN CNAME "+sel1+".dkim.mailyard.test.")
	s.customer.Add(t, sel2+"._domainkey."+name+". 300 IN CNAME "+sel2+".dkim.mailyard.test.")
	s.customer.Add(t, `mail.`+name+`. 300 IN TXT "v=spf1 include:spf.mailyard.test ~all"`)
	s.customer.Add(t, "mail."+name+". 300 IN MX 10 bounces.mailyard.test.")
	testenv.Eventually(t, 60*time.Second, name+" verified", func() bool {
		return api.domain(id).Status == "verified"
	})
	return id, sel1, sel2
}

// assertDKIM verifies the message's signature the way a receiver does: the
// key is looked up in DNS, through the customer's zone (its CNAME leads into
// the zone `mailyard dns` serves).
func assertDKIM(t *testing.T, s *stack, msg []byte, domain, selector string) {
	t.Helper()
	lookup := func(name string) ([]string, error) {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeTXT)
		// TCP: a 2048-bit key does not fit a plain UDP answer.
		in, _, err := (&dns.Client{Net: "tcp", Timeout: 5 * time.Second}).Exchange(m, s.customer.Addr)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, rr := range in.Answer {
			if txt, ok := rr.(*dns.TXT); ok {
				out = append(out, strings.Join(txt.Txt, ""))
			}
		}
		if len(out) == 0 {
			return nil, errors.New("no TXT record at " + name)
		}
		return out, nil
	}
	verifs, err := dkim.VerifyWithOptions(bytes.NewReader(msg), &dkim.VerifyOptions{LookupTXT: lookup})
	if err != nil || len(verifs) != 1 {
		t.Fatalf("DKIM: %d signatures, %v", len(verifs), err)
	}
	v := verifs[0]
	if v.Err != nil || v.Domain != domain {
		t.Fatalf("DKIM signature of %s: %v", v.Domain, v.Err)
	}
	if !strings.Contains(string(msg), "s="+selector+";") {
		t.Fatalf("signed with another selector than %s", selector)
	}
}
