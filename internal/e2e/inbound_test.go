package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"net/smtp"
	"net/textproto"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// startInbound starts `mailyard inbound` on a free port with its metrics
// listener and returns its SMTP address and /metrics URL.
func (s *stack) startInbound(extraEnv ...string) (addr, metricsURL string) {
	s.t.Helper()
	addr, metrics := testenv.FreeAddr(s.t), testenv.FreeAddr(s.t)
	testenv.Start(s.t, slices.Concat(s.env, []string{"MAILYARD_INBOUND_ADDR=" + addr, "MAILYARD_METRICS_ADDR=" + metrics}, extraEnv), "inbound")
	testenv.WaitListening(s.t, addr, 30*time.Second)
	return addr, "http://" + metrics + "/metrics"
}

// sendMail sends one message with Go's net/smtp client, a client Mailyard
// did not write, and returns the server's error, if any.
func sendMail(addr, from string, to []string, msg string) error {
	return smtp.SendMail(addr, nil, from, to, []byte(strings.ReplaceAll(msg, "\n", "\r\n")))
}

// postfixDSN is a delivery status notification the way Postfix writes one,
// for one recipient.
func postfixDSN(envelopeSender, recipient, messageID, status, diagnostic string) string {
	return fmt.Sprintf(`Return-Path: <>
From: MAILER-DAEMON@mx.rcpt.example (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: %[1]s
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
	boundary="5F1A2B3C4D.1732500000/mx.rcpt.example"
Message-Id: <20261125010203.5F1A2B3C4D@mx.rcpt.example>

This is a MIME-encapsulated message.

--5F1A2B3C4D.1732500000/mx.rcpt.example
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.rcpt.example.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients.

<%[2]s>: host inner.rcpt.example said: %[5]s

--5F1A2B3C4D.1732500000/mx.rcpt.example
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.rcpt.example
X-Postfix-Queue-ID: 5F1A2B3C4D
Arrival-Date: Wed, 25 Nov 2026 01:02:00 +0000 (UTC)

Final-Recipient: rfc822; %[2]s
Original-Recipient: rfc822;%[2]s
Action: failed
Status: %[4]s
Remote-MTA: dns; inner.rcpt.example
Diagnostic-Code: smtp; %[5]s

--5F1A2B3C4D.1732500000/mx.rcpt.example
Content-Description: Undelivered Message Headers
Content-Type: text/rfc822-headers

Return-Path: <%[1]s>
From: Shop <billing@shop.example>
To: %[2]s
Subject: Hello
Message-ID: <%[3]s>

--5F1A2B3C4D.1732500000/mx.rcpt.example--
`, envelopeSender, recipient, messageID, status, diagnostic)
}

// yahooARF is a feedback-loop complaint in RFC 5965 form, as Yahoo sends
// them: the original attached whole as message/rfc822, with the Return-Path
// its mailbox stored it with.
func yahooARF(to, recipient, messageID, returnPath string) string {
	return fmt.Sprintf(`From: feedbackloop@comcast.example
To: %[1]s
Subject: FW: Hello
MIME-Version: 1.0
Message-ID: <arf-20261125-1@feedback.example>
Content-Type: multipart/report; report-type=feedback-report;
	boundary="----=_Part_1_arf"

------=_Part_1_arf
Content-Type: text/plain; charset="US-ASCII"

This is an email abuse report for an email message received from IP 192.0.2.1.

------=_Part_1_arf
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: YahooMailFBL/1.0
Version: 1
Original-Mail-From: <bounces@mail.shop.example>
Original-Rcpt-To: <%[2]s>
Arrival-Date: Wed, 25 Nov 2026 01:00:00 +0000
Source-IP: 192.0.2.1

------=_Part_1_arf
Content-Type: message/rfc822

Return-Path: <%[4]s>
From: Shop <billing@shop.example>
To: %[2]s
Subject: Hello
Message-ID: <%[3]s>
Date: Wed, 25 Nov 2026 01:00:00 +0000

Hello.
------=_Part_1_arf--
`, to, recipient, messageID, returnPath)
}

// Bounces and complaints that arrive by mail at the bounce host, through
// the real api, worker, dns and inbound processes on PostgreSQL and
// Temporal: a Postfix DSN turns a delivered recipient bounced (async) and
// suppresses it, a Yahoo-style ARF report to fbl@ records a complaint, both
// reach webhooks, statistics and the email's event list exactly once (the
// same report again changes nothing), and nothing but what Mailyard handed
// out is accepted. A report that one recipient forges about another, with
// its own return path, changes nothing; nor does a report naming another
// organization's email.
func TestInboundReportsEndToEnd(t *testing.T) {
	t.Parallel()
	mx := startMX(t)
	s := startStack(t, topology{env: append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		// The worker's retention sweep erases the handled messages
		// within the test.
		"MAILYARD_EMAIL_RETENTION=3s",
	)})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	inboundAddr, inboundMetrics := s.startInbound()

	rcv := &eventReceiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	api := s.api()
	api.createWebhook(hook.URL+"/hooks", "delivered", "bounced", "complained")

	id, _, _ := verifiedDomain(t, s, "shop.example")
	sender := api.as(api.sendKey(id))
	first := sender.send(map[string]any{
		"from": "Shop <billing@shop.example>", "to": []string{"ada@rcpt.example", "bob@rcpt.example"}, "subject": "Hello", "text": "Hello.",
	}).ID
	testenv.Eventually(t, 30*time.Second, "email sent", func() bool {
		return sender.email(first).Status == "sent"
	})
	// Each recipient's return path, as its mailbox received it.
	mx.mu.Lock()
	firstSender, bobSender := mx.senderOf["ada@rcpt.example"], mx.senderOf["bob@rcpt.example"]
	mx.mu.Unlock()
	if !strings.Contains(firstSender, first) || !strings.Contains(bobSender, first) || firstSender == bobSender {
		t.Fatalf("return paths %q and %q of %s", firstSender, bobSender, first)
	}
	firstMessageID := first + "@shop.example"
	testenv.Eventually(t, 30*time.Second, "two delivered events", func() bool { return len(rcv.all()) >= 2 })

	// Only Mailyard's addresses are accepted: a forged tag, an untagged
	// address for a tagged email, a stranger at the bounce host.
	local, domain, _ := strings.Cut(firstSender, "@")
	forged := local[:len(local)-8] + "aaaaaaaa@" + domain
	for _, rcpt := range []string{forged, "bounces+" + first + "@" + domain, "postmaster@bounces.mailyard.test", "someone@shop.example"} {
		err := sendMail(inboundAddr, "", []string{rcpt}, postfixDSN(firstSender, "ada@rcpt.example", firstMessageID, "5.1.1", "550 5.1.1 no such user"))
		if err == nil || !strings.Contains(err.Error(), "550") {
			t.Fatalf("RCPT TO %s: %v, want 550 5.1.1", rcpt, err)
		}
	}
	// A bare LF in the data is refused (SMTP smuggling); Go's client would
	// turn it into CRLF, so this one is spoken by hand.
	if code := rawData(t, inboundAddr, firstSender, "Subject: x\r\n\r\nsmuggled\n.\nMAIL FROM:<x@y>\r\n"); code != "550 5.6.0" {
		t.Fatalf("bare LF: %q, want 550 5.6.0", code)
	}

	// bob@ forges a hard bounce of ada@ and a complaint of ada@, with the
	// return path of the copy it received: both are handled, and change
	// nothing.
	if err := sendMail(inboundAddr, "", []string{bobSender}, postfixDSN(bobSender, "ada@rcpt.example", firstMessageID, "5.1.1", "550 5.1.1 no such user")); err != nil {
		t.Fatalf("forged DSN: %v", err)
	}
	if err := sendMail(inboundAddr, "bob@rcpt.example", []string{"fbl@bounces.mailyard.test"}, yahooARF("fbl@bounces.mailyard.test", "ada@rcpt.example", firstMessageID, bobSender)); err != nil {
		t.Fatalf("forged ARF: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "forged reports handled", func() bool {
		scrape := testenv.Scrape(t, s.metricsURL["worker"])
		return testenv.Sample(t, scrape, `mailyard_inbound_messages_total{kind="dsn"}`) == 1 &&
			testenv.Sample(t, scrape, `mailyard_inbound_messages_total{kind="arf"}`) == 1
	})

	// A hard bounce after delivery, sent twice.
	dsn := postfixDSN(firstSender, "ada@rcpt.example", firstMessageID, "5.1.1",
		"550 5.1.1 <ada@rcpt.example>: Recipient address rejected: User unknown in virtual mailbox table")
	for range 2 {
		if err := sendMail(inboundAddr, "", []string{firstSender}, dsn); err != nil {
			t.Fatalf("DSN: %v", err)
		}
	}
	// A complaint about bob@, to the feedback-loop address.
	if err := sendMail(inboundAddr, "feedbackloop@comcast.example", []string{"fbl@bounces.mailyard.test"}, yahooARF("fbl@bounces.mailyard.test", "bob@rcpt.example", firstMessageID, bobSender)); err != nil {
		t.Fatalf("ARF: %v", err)
	}

	testenv.Eventually(t, 30*time.Second, "bounced and complained events", func() bool { return len(rcv.all()) >= 4 })
	time.Sleep(2 * time.Second) // a fifth would be a duplicate
	events := rcv.all()
	if len(events) != 4 {
		t.Fatalf("%d events: %v", len(events), events)
	}
	byType := map[string]map[string]any{}
	for _, ev := range events[2:] {
		byType[ev["event_type"].(string)] = ev["data"].(map[string]any)
	}
	bounce, complaint := byType["bounced"], byType["complained"]
	if bounce == nil || bounce["message_id"] != first || bounce["to_email"] != "ada@rcpt.example" || bounce["bounce_type"] != "hard" ||
		bounce["async"] != true || bounce["smtp_code"] != float64(550) || bounce["enhanced_status"] != "5.1.1" ||
		!strings.Contains(fmt.Sprint(bounce["smtp_message"]), "User unknown") {
		t.Fatalf("bounced event %v", bounce)
	}
	if complaint == nil || complaint["message_id"] != first || complaint["to_email"] != "bob@rcpt.example" ||
		complaint["feedback_type"] != "abuse" || complaint["user_agent"] != "YahooMailFBL/1.0" {
		t.Fatalf("complained event %v", complaint)
	}

	// The email: ada@ bounced after delivery, bob@ still delivered.
	got := sender.email(first)
	status := map[string]string{}
	for _, r := range got.Recipients {
		status[r.Email] = r.Status
	}
	if status["ada@rcpt.example"] != "bounced" || status["bob@rcpt.example"] != "delivered" {
		t.Fatalf("recipients %+v", got.Recipients)
	}
	sups := map[string]string{}
	for _, x := range api.suppressions() {
		sups[x.Email] = x.Reason
	}
	if sups["ada@rcpt.example"] != "hard_bounce" || sups["bob@rcpt.example"] != "complaint" || len(sups) != 2 {
		t.Fatalf("suppressions %v", sups)
	}
	totals := api.statsOn(today())
	for counter, n := range map[string][2]int64{"accepted": {totals.Accepted, 2}, "delivered": {totals.Delivered, 2}, "bounced": {totals.Bounced, 1}, "complained": {totals.Complained, 1}} {
		if n[0] != n[1] {
			t.Fatalf("stats %s = %d, want %d (%+v)", counter, n[0], n[1], totals)
		}
	}
	listed := sender.emailEvents(first)
	// Oldest first: the deliveries, then the two reports in the order they
	// were handled (they arrived at once).
	var types []string
	var listedBounce map[string]any
	for _, e := range listed {
		types = append(types, e.EventType)
		if e.EventType == "bounced" {
			listedBounce = e.Data
		}
	}
	if !slices.Equal(types[:2], []string{"delivered", "delivered"}) || !slices.Equal(slices.Sorted(slices.Values(types[2:])), []string{"bounced", "complained"}) {
		t.Fatalf("email events %v", types)
	}
	if listedBounce["async"] != true || listedBounce["bounce_type"] != "hard" {
		t.Fatalf("listed bounce %v", listedBounce)
	}

	// Another organization's email: a report sent to the first email's
	// address that names the other email's recipient and Message-ID changes
	// nothing there (nor here: the first email has no such recipient).
	otherKey := regexp.MustCompile(`myk_[0-9A-Za-z]+`).FindString(s.run("org", "create", "other"))
	other := *s
	other.adminKey = otherKey
	otherID, _, _ := verifiedDomain(t, &other, "other.example")
	otherAPI := other.api()
	otherSender := otherAPI.as(otherAPI.sendKey(otherID))
	otherEmail := otherSender.send(map[string]any{
		"from": "news@other.example", "to": "carol@rcpt.example", "subject": "Other", "text": "Other.",
	}).ID
	testenv.Eventually(t, 30*time.Second, "other email sent", func() bool {
		return otherSender.email(otherEmail).Status == "sent"
	})
	if err := sendMail(inboundAddr, "", []string{firstSender},
		postfixDSN(firstSender, "carol@rcpt.example", otherEmail+"@other.example", "5.1.1", "550 5.1.1 no such user")); err != nil {
		t.Fatal(err)
	}
	if err := sendMail(inboundAddr, "x@feedback.example", []string{"fbl@bounces.mailyard.test"},
		yahooARF("fbl@bounces.mailyard.test", "carol@rcpt.example", otherEmail+"@forged.example", "")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "reports handled", func() bool {
		scrape := testenv.Scrape(t, s.metricsURL["worker"])
		return testenv.Sample(t, scrape, `mailyard_inbound_messages_total{kind="dsn"}`) == 4 &&
			testenv.Sample(t, scrape, `mailyard_inbound_messages_total{kind="arf"}`) == 3
	})
	r := otherSender.email(otherEmail).Recipients[0]
	if r.Status != "delivered" {
		t.Fatalf("the other organization's recipient is %+v", r)
	}
	if n := len(otherAPI.suppressions()); n != 0 {
		t.Fatalf("the other organization has %d suppressions", n)
	}
	if n := len(rcv.all()); n != 4 {
		t.Fatalf("%d events after reports about another email", n)
	}
	testenv.CheckMetrics(t, []byte(testenv.Scrape(t, inboundMetrics)))

	// Operators see ids and kinds in the inbound workflows' histories, never
	// an address or the subject.
	scanHistories(t, s.temporal, "InboundMessage", []string{"rcpt.example", "billing@", "Hello", "User unknown"})
	recordInboundHistories(t, s)

	// The retention sweep erases each handled message's bytes and
	// addresses once the retention time after its handling is over.
	st := testenv.OpenStore(t, s.databaseURL)
	testenv.Eventually(t, 30*time.Second, "handled messages erased", func() bool {
		var left int
		err := st.DB.NewRaw("SELECT count(*) FROM inbound_messages WHERE raw IS NOT NULL OR erased_at IS NULL OR mail_from <> ''").Scan(context.Background(), &left)
		if err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	var early int
	if err := st.DB.NewRaw("SELECT count(*) FROM inbound_messages WHERE erased_at < handled_at + interval '3 seconds'").Scan(context.Background(), &early); err != nil || early != 0 {
		t.Fatalf("%d messages erased before their retention time (%v)", early, err)
	}
}

// recordInboundHistories waits for the inbound workflows to end and, with
// MAILYARD_RECORD_HISTORIES set, keeps one history of each kind under
// workflows/inbound/testdata for the replay tests.
func recordInboundHistories(t *testing.T, s *stack) {
	t.Helper()
	ctx := context.Background()
	var runs []*workflowpb.WorkflowExecutionInfo
	testenv.Eventually(t, 60*time.Second, "inbound workflows closed", func() bool {
		page, err := s.temporalC.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: `WorkflowType = "InboundMessage"`})
		if err != nil {
			t.Fatal(err)
		}
		runs = page.Executions
		for _, r := range runs {
			if r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				return false
			}
		}
		return len(runs) == 7
	})
	seen := map[string]bool{}
	for _, r := range runs {
		var res struct {
			Kind    string `json:"kind"`
			Effects int    `json:"effects"`
		}
		if err := s.temporalC.GetWorkflow(ctx, r.Execution.WorkflowId, r.Execution.RunId).Get(ctx, &res); err != nil {
			t.Fatalf("%s: %v", r.Execution.WorkflowId, err)
		}
		name := fmt.Sprintf("%s-%d-effects", res.Kind, res.Effects)
		if seen[name] {
			continue
		}
		seen[name] = true
		recordHistory(t, "../../workflows/inbound/testdata/inbound-message-v3-"+name+".json", s.historyJSON(r.Execution.WorkflowId, r.Execution.RunId))
	}
}

// More connections than MAILYARD_SMTP_MAX_CONNECTIONS are answered 421 and
// closed; the process stays up and serves again once they are gone.
func TestInboundConnectionCap(t *testing.T) {
	t.Parallel()
	s := startStack(t, topology{noAPI: true, noDNS: true})
	addr, _ := s.startInbound("MAILYARD_SMTP_MAX_CONNECTIONS=500")

	var mu sync.Mutex
	var conns []net.Conn
	greetings := map[string]int{}
	var wg sync.WaitGroup
	for range 600 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			mu.Lock()
			defer mu.Unlock()
			conns = append(conns, c)
			greetings[strings.SplitN(string(buf[:n]), " ", 2)[0]]++
		}()
	}
	wg.Wait()
	if greetings["220"] != 500 || greetings["421"] != 100 {
		t.Fatalf("greetings by code %v, want 500 × 220 and 100 × 421", greetings)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	testenv.Eventually(t, 10*time.Second, "served again", func() bool {
		c, err := smtp.Dial(addr)
		if err != nil {
			return false
		}
		defer c.Close()
		return c.Hello("client.example") == nil
	})
}

// rawData sends data (which ends without the final dot line) to rcpt over a
// connection spoken by hand, and returns the reply to the end of data: its
// code and enhanced code.
func rawData(t *testing.T, addr, rcpt, data string) string {
	t.Helper()
	c, err := textproto.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	step := func(want int, format string, args ...any) {
		t.Helper()
		if format != "" {
			if _, err := c.Cmd(format, args...); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := c.ReadResponse(want); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
	}
	step(220, "")
	step(250, "EHLO client.example")
	step(250, "MAIL FROM:<>")
	step(250, "RCPT TO:<%s>", rcpt)
	step(354, "DATA")
	if _, err := c.W.WriteString(data + "\r\n.\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.W.Flush(); err != nil {
		t.Fatal(err)
	}
	code, msg, _ := c.ReadResponse(0)
	enhanced, _, _ := strings.Cut(msg, " ")
	return fmt.Sprintf("%d %s", code, enhanced)
}

// With the database stopped, the inbound listener answers 451 4.3.0 (the
// sender keeps the message and retries) and stores nothing; once it is back
// the same message is taken. The process stays up throughout.
func TestInboundDatabaseDown(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	s := startStack(t, topology{database: pg.URL, noAPI: true, noDNS: true})
	addr, _ := s.startInbound()
	key, _ := base64.StdEncoding.DecodeString(testEncryptionKey)
	tags, err := bouncetag.New(key)
	if err != nil {
		t.Fatal(err)
	}
	// A well-tagged address of an email the database would have to look up.
	tagged := tags.Sender(uuid.Must(uuid.NewV7()).String(), "mail.shop.example")
	report := yahooARF("fbl@bounces.mailyard.test", "ada@rcpt.example", "x@shop.example", tagged)

	if err := sendMail(addr, "fbl@feedback.example", []string{"fbl@bounces.mailyard.test"}, report); err != nil {
		t.Fatalf("with the database up: %v", err)
	}
	// The worker past its start (it reads the migration status first), so
	// that its surviving the outage below is about the outage.
	testenv.Eventually(t, time.Minute, "the worker's three task queues", func() bool {
		return strings.Count(s.worker.Output(), "Started Worker") == 3
	})
	pg.Stop()
	for name, rcpt := range map[string]string{"at DATA": "fbl@bounces.mailyard.test", "at RCPT": tagged} {
		err := sendMail(addr, "fbl@feedback.example", []string{rcpt}, report)
		var reply *textproto.Error
		if !errors.As(err, &reply) || reply.Code != 451 || !strings.HasPrefix(reply.Msg, "4.3.0") {
			t.Fatalf("%s with the database down: %v, want 451 4.3.0", name, err)
		}
	}
	pg.Start()
	testenv.Eventually(t, 60*time.Second, "taken again", func() bool {
		return sendMail(addr, "fbl@feedback.example", []string{"fbl@bounces.mailyard.test"}, report) == nil
	})
	// Opened after the restart: a pool from before holds dead connections.
	st := testenv.OpenStore(t, pg.URL)
	if n, err := st.DB.NewSelect().Model((*store.InboundMessage)(nil)).Count(context.Background()); err != nil || n != 2 {
		t.Fatalf("%d messages stored (%v), want the two answered 250", n, err)
	}
	if s.worker.Exited() {
		t.Fatalf("the worker exited: %s", s.worker.Output())
	}
}
