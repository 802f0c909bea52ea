package activities_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/delivery"
	"github.com/mailyard/mailyard/workflows/inbound"
)

// The email every report under internal/bouncereport/testdata is about,
// and the return path they give it, whose tag is made up: the fixture
// writes its own tagger's in its place (receive).
const (
	reportedEmailID = "0193a7c2-5b1e-7c3d-9f00-123456789abc"
	testdataSender  = "bounces+" + reportedEmailID + ".k3j5m2q7@mail.shop.example"
)

type inboundFixture struct {
	a     *activities.Inbound
	st    *store.Store
	org   int64
	email *store.Email
	// sender is the email's email-wide envelope sender under the
	// fixture's tagger.
	sender string
}

// newInboundFixture stores the reported email (delivered to each of
// recipients) over a real PostgreSQL database.
func newInboundFixture(t *testing.T, recipients ...string) *inboundFixture {
	t.Helper()
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "shop", keyauth.WithSecret(secret, &store.APIKey{Label: "boot", Username: "shop", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	e := &store.Email{ID: reportedEmailID, OrganizationID: org.ID, DomainID: d.ID, FromAddress: "news@shop.example", Subject: "Your order has shipped", Content: []byte("{}")}
	if err := st.CreateEmail(ctx, e, recipients); err != nil {
		t.Fatal(err)
	}
	tags, err := bouncetag.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sender := tags.Sender(e.ID, "mail.shop.example")
	if _, err := st.AcceptEmail(ctx, e.ID, store.Acceptance{EnvelopeSender: sender, Recipients: len(recipients)}); err != nil {
		t.Fatal(err)
	}
	for i := range recipients {
		if _, err := st.ChangeRecipient(ctx, e.ID, store.RecipientChange{Position: i, Status: store.RecipientDelivered}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return &inboundFixture{a: &activities.Inbound{Store: st, Tags: tags}, st: st, org: org.ID, email: e, sender: sender}
}

// recipientSender is the return path of the email's recipient at position.
func (f *inboundFixture) recipientSender(t *testing.T, position int) string {
	t.Helper()
	sender, ok := f.a.Tags.RecipientSender(f.sender, position)
	if !ok {
		t.Fatal("no recipient return path")
	}
	return sender
}

// testdataReport reads a report under internal/bouncereport/testdata.
func testdataReport(t *testing.T, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "internal", "bouncereport", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// receive stores a testdata report as the listener does: sent to the email's
// envelope sender (toEmail) or to fbl@ of the bounce host.
func (f *inboundFixture) receive(t *testing.T, file string, toEmail bool, mailFrom string) string {
	t.Helper()
	return f.receiveAt(t, testdataReport(t, file), f.sender, toEmail, mailFrom)
}

// receiveAt stores raw, with returnPath for the return path it gives, as
// the listener does: sent to returnPath (toEmail) or to fbl@ of the bounce
// host.
func (f *inboundFixture) receiveAt(t *testing.T, raw []byte, returnPath string, toEmail bool, mailFrom string) string {
	t.Helper()
	raw = bytes.ReplaceAll(raw, []byte(testdataSender), []byte(returnPath))
	m := &store.InboundMessage{ID: uuid.Must(uuid.NewV7()).String(), MailFrom: mailFrom, Raw: raw, Recipients: store.AddressList{"fbl@bounces.example"}}
	if toEmail {
		m.Recipients = store.AddressList{returnPath}
		m.EmailID, m.OrganizationID, m.DomainID = &f.email.ID, &f.email.OrganizationID, &f.email.DomainID
	}
	if err := f.st.CreateInboundMessage(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

func (f *inboundFixture) handle(t *testing.T, id string) inbound.HandleResult {
	t.Helper()
	res, err := f.a.Handle(context.Background(), inbound.HandleInput{InboundID: id})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *inboundFixture) recipient(t *testing.T, addr string) store.EmailRecipient {
	t.Helper()
	rs, err := f.st.EmailRecipients(context.Background(), f.email.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Address == addr {
			return r
		}
	}
	t.Fatalf("no recipient %s", addr)
	return store.EmailRecipient{}
}

func (f *inboundFixture) events(t *testing.T) map[string]int {
	t.Helper()
	events, _, err := f.st.EmailEvents(context.Background(), store.EmailScope{OrganizationID: f.org}, f.email.ID, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range events {
		out[e.EventType+" "+e.ToEmail]++
	}
	return out
}

func (f *inboundFixture) suppressed(t *testing.T) map[string]string {
	t.Helper()
	rows, _, err := f.st.ListSuppressions(context.Background(), f.org, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.Email] = r.Reason
	}
	return out
}

// Each kind of report has the effect docs/inbound.md gives it, once: a
// report handled twice, or received twice, changes nothing the second time.
func TestHandleReports(t *testing.T) {
	f := newInboundFixture(t, "nobody@example.org", "full@example.org", "slow@example.org", "reader@example.org", "gone.user@example.org")

	hard := f.receive(t, "postfix-hard.eml", true, "")
	if res := f.handle(t, hard); res.Kind != store.InboundDSN || res.Effects != 1 || res.OrganizationID != f.org {
		t.Fatalf("hard DSN: %+v", res)
	}
	if r := f.recipient(t, "nobody@example.org"); r.Status != store.RecipientBounced || r.SMTPCode == nil || *r.SMTPCode != 550 {
		t.Fatalf("hard-bounced recipient %+v", r)
	}
	// Handled again (a retried step), and received again: nothing more.
	if res := f.handle(t, hard); res.Effects != 0 {
		t.Fatalf("second handling: %+v", res)
	}
	if res := f.handle(t, f.receive(t, "postfix-hard.eml", true, "")); res.Kind != store.InboundDSN || res.Effects != 0 {
		t.Fatalf("the same report again: %+v", res)
	}

	if res := f.handle(t, f.receive(t, "soft-failed-mailbox-full.eml", true, "")); res.Kind != store.InboundDSN || res.Effects != 1 {
		t.Fatalf("soft DSN: %+v", res)
	}
	if r := f.recipient(t, "full@example.org"); r.Status != store.RecipientBounced {
		t.Fatalf("soft-bounced recipient %+v", r)
	}
	if res := f.handle(t, f.receive(t, "postfix-delayed.eml", true, "")); res.Kind != store.InboundDSN || res.Effects != 0 {
		t.Fatalf("delayed DSN: %+v", res)
	}
	if r := f.recipient(t, "slow@example.org"); r.Status != store.RecipientDelivered || r.LastResponse == nil {
		t.Fatalf("delayed recipient %+v", r)
	}

	// A complaint to fbl@ finds the email by the original's Message-ID.
	if res := f.handle(t, f.receive(t, "arf-yahoo.eml", false, "fbl@isp.example")); res.Kind != store.InboundARF || res.Effects != 1 || res.OrganizationID != f.org {
		t.Fatalf("ARF: %+v", res)
	}
	if res := f.handle(t, f.receive(t, "arf-yahoo.eml", false, "fbl@isp.example")); res.Effects != 0 {
		t.Fatalf("ARF again: %+v", res)
	}
	if res := f.handle(t, f.receive(t, "arf-not-spam.eml", false, "fbl@isp.example")); res.Kind != store.InboundARFOther || res.Effects != 0 {
		t.Fatalf("not-spam ARF: %+v", res)
	}

	if res := f.handle(t, f.receive(t, "qmail.eml", true, "")); res.Kind != store.InboundLegacyBounce || res.Effects != 1 {
		t.Fatalf("qmail bounce: %+v", res)
	}
	if res := f.handle(t, f.receive(t, "ooo-auto-submitted.eml", true, "reader@example.org")); res.Kind != store.InboundAutoReply || res.Effects != 0 {
		t.Fatalf("auto-reply: %+v", res)
	}
	if res := f.handle(t, f.receive(t, "human-reply.eml", true, "reader@example.org")); res.Kind != store.InboundUnrecognized {
		t.Fatalf("human reply: %+v", res)
	}

	wantEvents := map[string]int{
		"bounced nobody@example.org": 1, "bounced full@example.org": 1, "complained reader@example.org": 1, "bounced gone.user@example.org": 1,
	}
	got := f.events(t)
	for k, n := range wantEvents {
		if got[k] != n {
			t.Fatalf("events %v, want %v", got, wantEvents)
		}
	}
	if len(got) != len(wantEvents) {
		t.Fatalf("events %v, want %v", got, wantEvents)
	}
	wantSups := map[string]string{"nobody@example.org": "hard_bounce", "reader@example.org": "complaint", "gone.user@example.org": "hard_bounce"}
	if sups := f.suppressed(t); len(sups) != len(wantSups) || sups["nobody@example.org"] != "hard_bounce" ||
		sups["reader@example.org"] != "complaint" || sups["gone.user@example.org"] != "hard_bounce" {
		t.Fatalf("suppressions %v, want %v", sups, wantSups)
	}
}

// receiveRaw stores a message of the given bytes as the listener does, sent
// to fbl@ of the bounce host or to the email's envelope sender.
func (f *inboundFixture) receiveRaw(t *testing.T, raw []byte, toEmail bool) string {
	t.Helper()
	return f.receiveAt(t, raw, f.sender, toEmail, "")
}

// A report that came back to one recipient's own return path, or that
// gives it to fbl@, concerns that recipient only: a recipient sees only its
// own, so one who forges a bounce or a complaint naming another recipient
// of the same email changes nothing. A report that names nobody the email
// was sent to (providers redact) concerns the recipient whose return path
// it has.
func TestHandleReportsBoundToTheRecipientsReturnPath(t *testing.T) {
	f := newInboundFixture(t, "nobody@example.org", "reader@example.org", "gone.user@example.org")
	nobodys, readers, gones := f.recipientSender(t, 0), f.recipientSender(t, 1), f.recipientSender(t, 2)
	hard, arf, legacy := testdataReport(t, "postfix-hard.eml"), testdataReport(t, "arf-yahoo.eml"), testdataReport(t, "qmail.eml")
	step := func(what string, id string, effects int) {
		t.Helper()
		if res := f.handle(t, id); res.Effects != effects {
			t.Fatalf("%s: %+v, want %d effects", what, res, effects)
		}
	}

	step("a DSN naming nobody@, to reader@'s return path", f.receiveAt(t, hard, readers, true, ""), 0)
	step("a complaint naming reader@, to fbl@ with nobody@'s return path", f.receiveAt(t, arf, nobodys, false, "fbl@isp.example"), 0)
	step("a complaint to fbl@ without a return path", f.receiveAt(t, arf, "bounces@mail.shop.example", false, "fbl@isp.example"), 0)
	step("a complaint naming reader@, to fbl@ with a made-up untagged return path",
		f.receiveAt(t, arf, bouncetag.Untagged(reportedEmailID, "mail.shop.example"), false, "fbl@isp.example"), 0)
	step("a qmail bounce naming gone.user@, to reader@'s return path", f.receiveAt(t, legacy, readers, true, ""), 0)
	if got := f.events(t); len(got) != 0 {
		t.Fatalf("events after forged reports: %v", got)
	}

	step("a DSN naming nobody@, to nobody@'s return path", f.receiveAt(t, hard, nobodys, true, ""), 1)
	step("a complaint naming reader@, to fbl@ with reader@'s return path", f.receiveAt(t, arf, readers, false, "fbl@isp.example"), 1)
	redacted := regexp.MustCompile(`(?i)nobody@example\.org`).ReplaceAll(hard, []byte("xxxxxx@example.org"))
	step("a DSN naming no recipient, to reader@'s return path", f.receiveAt(t, redacted, readers, true, ""), 1)
	step("a qmail bounce naming gone.user@, to gone.user@'s return path", f.receiveAt(t, legacy, gones, true, ""), 1)

	want := map[string]int{"bounced nobody@example.org": 1, "complained reader@example.org": 1, "bounced reader@example.org": 1, "bounced gone.user@example.org": 1}
	if got := f.events(t); !maps.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// A complaint to fbl@ about an email whose Message-ID is its client's (SMTP
// submission keeps it) is found by the return path the report gives: before,
// only a Message-ID as Mailyard writes it named the email, and the
// complainer was never suppressed.
func TestComplaintFoundByItsReturnPath(t *testing.T) {
	f := newInboundFixture(t, "nobody@example.org", "reader@example.org")
	arf := bytes.ReplaceAll(testdataReport(t, "arf-yahoo.eml"), []byte("<"+reportedEmailID+"@shop.example>"), []byte("<1700000000.42@app.example>"))
	if res := f.handle(t, f.receiveAt(t, arf, "bounces@mail.shop.example", false, "fbl@isp.example")); res.Effects != 0 {
		t.Fatalf("a complaint naming neither a return path nor a Message-ID of Mailyard's: %+v", res)
	}
	if res := f.handle(t, f.receiveAt(t, arf, f.recipientSender(t, 1), false, "fbl@isp.example")); res.Effects != 1 {
		t.Fatalf("a complaint with reader@'s return path: %+v, want 1 effect", res)
	}
	if got, want := f.events(t), map[string]int{"complained reader@example.org": 1}; !maps.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// An empty message (which anyone may send to fbl@) is handled like any
// other, so the sweep stops listing it: unhandled, it would be restarted
// forever and, a hundred of them, fill every sweep. Rows stored by older
// listeners hold NULL for an empty message; they are handled too.
func TestHandleEmptyMessage(t *testing.T) {
	f := newInboundFixture(t, "reader@example.org")
	ctx := context.Background()
	ids := []string{f.receiveRaw(t, []byte{}, false), f.receiveRaw(t, nil, false), f.receiveRaw(t, []byte{}, true)}
	for _, id := range ids {
		if res := f.handle(t, id); res.Kind != store.InboundUnrecognized || res.Effects != 0 {
			t.Fatalf("empty message: %+v", res)
		}
		m, err := f.st.InboundMessageByID(ctx, id)
		if err != nil || m.HandledAt == nil || m.Kind == nil || *m.Kind != store.InboundUnrecognized {
			t.Fatalf("empty message after handling: %+v, %v", m, err)
		}
	}
	rows, err := f.st.UnhandledInboundBefore(ctx, time.Now().Add(time.Hour), 100)
	if err != nil || len(rows) != 0 {
		t.Fatalf("still listed by the sweep: %+v, %v", rows, err)
	}
}

// A message the retention sweep erased before it was ever handled (its run
// came after the retention time) changes nothing when its run comes: a
// hard bounce it may have carried is gone with its bytes, and the message
// is neither classified nor marked handled.
func TestHandleMessageErasedUnhandled(t *testing.T) {
	f := newInboundFixture(t, "nobody@example.org")
	ctx := context.Background()
	id := f.receive(t, "postfix-hard.eml", true, "")
	if n, err := f.st.EraseInboundUnhandledBefore(ctx, time.Now().Add(time.Minute), 10); err != nil || n != 1 {
		t.Fatalf("erased %d (%v), want the message", n, err)
	}
	if res := f.handle(t, id); res.Kind != store.InboundUnrecognized || res.Effects != 0 {
		t.Fatalf("erased message: %+v", res)
	}
	m, err := f.st.InboundMessageByID(ctx, id)
	if err != nil || m.HandledAt != nil || m.Kind != nil {
		t.Fatalf("erased message after its run: %+v, %v", m, err)
	}
	if r := f.recipient(t, "nobody@example.org"); r.Status != store.RecipientDelivered {
		t.Fatalf("recipient %s after an erased report, want delivered", r.Status)
	}
	if got := f.suppressed(t); len(got) != 0 {
		t.Fatalf("suppressed %v after an erased report", got)
	}
}

// flakyTemporal is a client of a real Temporal server that refuses the
// first workflow starts (Temporal unreachable) and records the ids of those
// it then makes.
type flakyTemporal struct {
	client.Client
	mu      sync.Mutex
	refuse  int
	started []string
}

func (c *flakyTemporal) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse > 0 {
		c.refuse--
		return nil, errors.New("temporal unavailable")
	}
	run, err := c.Client.ExecuteWorkflow(ctx, opts, workflow, args...)
	if err == nil {
		c.started = append(c.started, opts.ID)
	}
	return run, err
}

// complaintsWebhook subscribes a webhook to complained events and starts
// the fixture's deliveries through a client of the package's own Temporal
// server that refuses its first start.
func (f *inboundFixture) complaintsWebhook(t *testing.T) (*flakyTemporal, client.Client) {
	t.Helper()
	hook := &store.Webhook{OrganizationID: f.org, URL: "https://hooks.shop.example/mailyard", EventTypes: store.EventTypes{"complained"}}
	if err := f.st.CreateWebhook(context.Background(), hook, 20, func(int64) ([]byte, error) { return []byte("sealed"), nil }); err != nil {
		t.Fatal(err)
	}
	temporalC, err := client.Dial(client.Options{HostPort: testenv.OwnTemporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(temporalC.Close)
	tc := &flakyTemporal{Client: temporalC, refuse: 1}
	f.a.Runs = &deliveryruns.Runs{Temporal: tc, Store: f.st}
	return tc, temporalC
}

// A complaint sent to fbl@ whose webhook deliveries could not be started
// gets them started when the step is retried, although the message is
// handled by then: the handling recorded the email the complaint named.
func TestHandleRetriedComplaintStartsItsDeliveries(t *testing.T) {
	f := newInboundFixture(t, "reader@example.org")
	ctx := context.Background()
	tc, temporalC := f.complaintsWebhook(t)

	id := f.receive(t, "arf-yahoo.eml", false, "fbl@isp.example")
	if _, err := f.a.Handle(ctx, inbound.HandleInput{InboundID: id}); err == nil {
		t.Fatal("the first try succeeded although its delivery could not be started")
	}
	if m, err := f.st.InboundMessageByID(ctx, id); err != nil || m.HandledAt == nil {
		t.Fatalf("the complaint is not recorded as handled: %+v, %v", m, err)
	}
	// The local activity is retried.
	res := f.handle(t, id)
	if res.Kind != store.InboundARF || res.OrganizationID != f.org || res.DomainID != f.email.DomainID {
		t.Fatalf("retry: %+v", res)
	}
	pending, err := f.st.PendingEmailDeliveries(ctx, f.email.ID)
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending deliveries %v, %v", pending, err)
	}
	want := delivery.WorkflowID(pending[0])
	if len(tc.started) != 1 || tc.started[0] != want {
		t.Fatalf("started %v, want [%s]", tc.started, want)
	}
	if _, err := temporalC.DescribeWorkflowExecution(ctx, want, ""); err != nil {
		t.Fatalf("the delivery's workflow on the Temporal server: %v", err)
	}
}

// A "delayed" report that arrives after the recipient bounced keeps the
// bounce's response: the recipient is final.
func TestHandleLateDelayedKeepsTheBounce(t *testing.T) {
	f := newInboundFixture(t, "nobody@example.org")
	f.handle(t, f.receive(t, "postfix-hard.eml", true, ""))
	bounced := f.recipient(t, "nobody@example.org")
	if bounced.Status != store.RecipientBounced || bounced.LastResponse == nil {
		t.Fatalf("hard-bounced recipient %+v", bounced)
	}
	// The report names slow@example.org; the email's only recipient stands
	// for it (docs/inbound.md).
	if res := f.handle(t, f.receive(t, "postfix-delayed.eml", true, "")); res.Kind != store.InboundDSN || res.Effects != 0 {
		t.Fatalf("delayed DSN: %+v", res)
	}
	if r := f.recipient(t, "nobody@example.org"); r.Status != store.RecipientBounced || r.LastResponse == nil || *r.LastResponse != *bounced.LastResponse {
		t.Fatalf("after a late delayed DSN: %+v (response %q), want the bounce's %q", r, orNil(r.LastResponse), *bounced.LastResponse)
	}
}

func orNil(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// A report's diagnostic becomes the recipient's response and the bounced
// event's smtp_message. A forged report may make it 200 KB long, or put
// invalid UTF-8 in it; what is stored is cut and cleaned.
func TestHandleReportWithHostileDiagnostic(t *testing.T) {
	f := newInboundFixture(t, "nobody@example.org")
	raw, err := os.ReadFile(filepath.Join("..", "internal", "bouncereport", "testdata", "postfix-hard.eml"))
	if err != nil {
		t.Fatal(err)
	}
	long := "User \xff\xfe unknown" + strings.Repeat("\n    blah", 20000)
	at := bytes.LastIndex(raw, []byte("User unknown")) // the Diagnostic-Code's
	raw = slices.Concat(raw[:at], []byte(long), raw[at+len("User unknown"):])
	if res := f.handle(t, f.receiveRaw(t, raw, true)); res.Kind != store.InboundDSN || res.Effects != 1 {
		t.Fatalf("DSN: %+v", res)
	}
	r := f.recipient(t, "nobody@example.org")
	if r.Status != store.RecipientBounced || r.LastResponse == nil || !strings.Contains(*r.LastResponse, "User \uFFFD\uFFFD unknown blah") {
		t.Fatalf("bounced recipient %+v (response %.100q)", r, orNil(r.LastResponse))
	}
	if n := len(*r.LastResponse); n > 1100 {
		t.Fatalf("a %d-byte response stored", n)
	}
}

// dsnOf is a delivery status notification to returnPath with one
// per-recipient block for each of blocks: "address action status", and an
// Original-Recipient when a fourth field gives one.
func dsnOf(returnPath string, blocks ...string) []byte {
	var b strings.Builder
	b.WriteString("From: MAILER-DAEMON@mx.example.net\r\nTo: " + returnPath + "\r\nSubject: Delivery Status Notification\r\n" +
		"MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"b\"\r\n\r\n" +
		"--b\r\nContent-Type: text/plain\r\n\r\nSee below.\r\n" +
		"--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.net\r\n")
	for _, block := range blocks {
		f := strings.Fields(block)
		b.WriteString("\r\nFinal-Recipient: rfc822; " + f[0] + "\r\nAction: " + f[1] + "\r\nStatus: " + f[2] + "\r\n")
		if len(f) > 3 {
			b.WriteString("Original-Recipient: rfc822; " + f[3] + "\r\n")
		}
	}
	b.WriteString("--b--\r\n")
	return []byte(b.String())
}

// A report that names one of the email's recipients is read for those it
// names: a failed block for someone else (an alias's dead forwarding
// target, a relay's copy) no longer bounces and suppresses the recipient
// whose return path it came back to. Only a report naming none of them
// falls back to that recipient, through its most severe block.
func TestHandleDSNBlocksOfOtherAddresses(t *testing.T) {
	f := newInboundFixture(t, "ada@example.org", "bob@example.org", "cy@example.org")
	adas, bobs, cys := f.recipientSender(t, 0), f.recipientSender(t, 1), f.recipientSender(t, 2)
	step := func(what string, raw []byte, to string, effects int) {
		t.Helper()
		if res := f.handle(t, f.receiveAt(t, raw, to, true, "")); res.Effects != effects {
			t.Fatalf("%s: %+v, want %d effects", what, res, effects)
		}
	}
	step("ada@ expanded, her forward failed", dsnOf(adas, "ada@example.org expanded 2.0.0", "ada.old@forward.example failed 5.1.1"), adas, 0)
	// Postfix names the alias a failed target was reached through in
	// Original-Recipient: the block is about the target.
	step("ada@ relayed, her forward (reached through ada@) failed",
		dsnOf(adas, "ada@example.org relayed 2.0.0", "ada.old@forward.example failed 5.1.1 ada@example.org"), adas, 0)
	step("a relay's copy deferred, bob@ failed for good", dsnOf(bobs, "relay-copy@example.net failed 4.4.7", "bob@example.org failed 5.1.1"), bobs, 1)
	step("redacted: one soft and one hard failure", dsnOf(cys, "xxx@example.org failed 4.4.7", "yyy@example.org failed 5.1.1"), cys, 1)
	if r := f.recipient(t, "ada@example.org"); r.Status != store.RecipientDelivered {
		t.Fatalf("ada@ is %s", r.Status)
	}
	want := map[string]string{"bob@example.org": "hard_bounce", "cy@example.org": "hard_bounce"}
	if got := f.suppressed(t); !maps.Equal(got, want) {
		t.Fatalf("suppressions %v, want %v", got, want)
	}
}

// A complaint about a recipient that was sent nothing (suppressed when the
// email was prepared) is left alone: no complained event, and the reason it
// is on the list for (an unsubscribe) stays. Before, the complaint replaced
// it, and the address stopped getting any mail.
func TestComplaintAboutASuppressedRecipientIsLeftAlone(t *testing.T) {
	f := newInboundFixture(t, "ada@example.org", "reader@example.org")
	ctx := context.Background()
	if _, err := f.st.DB.NewUpdate().Model((*store.EmailRecipient)(nil)).Set("status = ?", store.RecipientSuppressed).
		Where("email_id = ?", f.email.ID).Where("address = ?", "reader@example.org").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.Suppress(ctx, f.st.DB, f.org, "reader@example.org", store.SuppressionUnsubscribe); err != nil {
		t.Fatal(err)
	}
	// arf-yahoo.eml names reader@ (Original-Rcpt-To), sent to the
	// email-wide return path, which may concern any recipient.
	if res := f.handle(t, f.receive(t, "arf-yahoo.eml", true, "fbl@isp.example")); res.Kind != store.InboundARF || res.Effects != 0 {
		t.Fatalf("the complaint: %+v, want no effect", res)
	}
	if got := f.suppressed(t); got["reader@example.org"] != store.SuppressionUnsubscribe {
		t.Fatalf("suppressions %v, want reader@ still unsubscribe", got)
	}
	if n := f.events(t)["complained"]; n != 0 {
		t.Fatalf("%d complained events", n)
	}
}

// A message that can record nothing (an auto-reply to a return path) does
// not start the email's pending webhook deliveries again: each such
// message, which anyone who knows a return path may send, made one start
// per pending delivery of the email.
func TestAutoReplyStartsNoDeliveries(t *testing.T) {
	f := newInboundFixture(t, "reader@example.org")
	ctx := context.Background()
	// A complaint whose delivery could not start leaves it pending.
	tc, _ := f.complaintsWebhook(t)
	if _, err := f.a.Handle(ctx, inbound.HandleInput{InboundID: f.receive(t, "arf-yahoo.eml", true, "fbl@isp.example")}); err == nil {
		t.Fatal("the complaint's delivery started")
	}
	if res := f.handle(t, f.receive(t, "ooo-auto-submitted.eml", true, "")); res.Kind != store.InboundAutoReply {
		t.Fatalf("the auto-reply: %+v", res)
	}
	if len(tc.started) != 0 {
		t.Fatalf("the auto-reply started %v", tc.started)
	}
}
