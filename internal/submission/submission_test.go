package submission_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/keyusage"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/ratelimit"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/submission"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is a submission server on PostgreSQL with a verified domain and a
// send credential; Temporal is unreachable, so no workflow starts.
type fixture struct {
	st             *store.Store
	addr           string
	user, secret   string
	organizationID int64
}

func newFixture(t *testing.T, limit config.RateLimit) *fixture {
	t.Helper()
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	admin, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "shop", keyauth.WithSecret(admin, &store.APIKey{Label: "a", Username: "a", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	secret, _ := keys.NewAPIKey()
	user := "app1@shop.example"
	if err := st.CreateCredential(ctx, keyauth.WithSecret(secret, &store.APIKey{OrganizationID: org.ID, SendingDomainID: &d.ID, Label: "app", Username: user,
		Permissions: store.Permissions{"send"}})); err != nil {
		t.Fatal(err)
	}
	dead, err := client.NewLazyClient(client.Options{HostPort: testenv.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dead.Close)
	srvCtx, cancel := context.WithCancel(ctx)
	usage := keyusage.New(st, slog.New(slog.DiscardHandler))
	go usage.Run(srvCtx)
	b := &submission.Backend{Store: st, Temporal: dead, Limits: ratelimit.New[int64](limit), Usage: usage, AllowInsecureAuth: true, Logger: slog.New(slog.DiscardHandler)}
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- b.Serve(srvCtx, submission.Listener{Addr: "127.0.0.1:0"}, func(a, _ string) { ready <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &fixture{st: st, addr: <-ready, user: user, secret: secret, organizationID: org.ID}
}

// send sends one message on c and returns the reply text or the error.
func send(c *gosmtp.Client, subject string) (string, error) {
	return sendWithHeader(c, "From: billing@shop.example\r\nTo: ada@rcpt.example\r\nSubject: "+subject+"\r\n")
}

// sendWithHeader sends a message with header, from billing@shop.example to
// ada@rcpt.example, and returns the reply text or the error.
func sendWithHeader(c *gosmtp.Client, header string) (string, error) {
	if err := c.Mail("billing@shop.example", nil); err != nil {
		return "", err
	}
	if err := c.Rcpt("ada@rcpt.example", nil); err != nil {
		return "", err
	}
	w, err := c.Data()
	if err != nil {
		return "", err
	}
	_, _ = w.Write([]byte(header + "\r\nHi.\r\n"))
	res, err := w.CloseWithResponse()
	if err != nil {
		return "", err
	}
	return res.StatusText, nil
}

// login connects to the fixture's server and authenticates with auth; the
// connection closes when the test ends.
func (f *fixture) login(t *testing.T, auth sasl.Client) *gosmtp.Client {
	t.Helper()
	c, err := gosmtp.Dial(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Auth(auth); err != nil {
		t.Fatalf("AUTH: %v", err)
	}
	return c
}

// AUTH LOGIN works (go-sasl's client against this server's LOGIN), and
// with Temporal unreachable a message is still stored, answered, and
// promised: the API's sweep starts its workflow. The key's use is recorded
// as the API records it.
func TestLoginAndTemporalDown(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewLoginClient(f.user, f.secret))
	reply, err := send(c, "logged in")
	id, ok := strings.CutPrefix(strings.TrimPrefix(reply, "2.0.0 "), "queued as ")
	if err != nil || !ok {
		t.Fatalf("reply %q, %v", reply, err)
	}
	e, _, err := f.st.EmailInScope(context.Background(), store.EmailScope{OrganizationID: f.organizationID}, id)
	if err != nil || !e.Answered || e.Source != store.SourceSMTP || e.Subject != "logged in" {
		t.Fatalf("stored %+v, %v", e, err)
	}
	unstarted, err := f.st.UnacceptedEmailsBefore(context.Background(), time.Now().Add(time.Minute), 10)
	if err != nil || len(unstarted) != 1 || unstarted[0].ID != id {
		t.Fatalf("the sweep does not see the email: %v %v", unstarted, err)
	}
	testenv.Eventually(t, 5*time.Second, "the key's last_used_at", func() bool {
		key := new(store.APIKey)
		err := f.st.DB.NewSelect().Model(key).Where("username = ?", f.user).Scan(context.Background())
		return err == nil && key.LastUsedAt != nil
	})
}

// A PLAIN response without its two NULs ("user:pass" from a misconfigured
// client) is a failed AUTH, 535 5.7.8 and counted, not go-smtp's temporary
// 454 that the client would retry for ever.
func TestUnreadablePlainResponseFails(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c, err := gosmtp.Dial(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for i, want := range []int{535, 535, 421} {
		err := c.Auth(rawPlain(f.user + ":" + f.secret))
		var reply *gosmtp.SMTPError
		if !errors.As(err, &reply) || reply.Code != want || want == 535 && reply.EnhancedCode != (gosmtp.EnhancedCode{5, 7, 8}) {
			t.Fatalf("unreadable response %d: %v, want %d", i+1, err, want)
		}
	}
}

// rawPlain is a SASL client that sends its response to AUTH PLAIN as it is.
type rawPlain string

func (r rawPlain) Start() (string, []byte, error) { return sasl.Plain, []byte(r), nil }
func (r rawPlain) Next([]byte) ([]byte, error)    { return nil, errors.New("unexpected challenge") }

// Each message spends one request of the key's rate limit, at MAIL FROM.
func TestRateLimitPerMessage(t *testing.T) {
	f := newFixture(t, config.RateLimit{Requests: 2, Per: time.Hour})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	burst := config.RateLimit{Requests: 2, Per: time.Hour}.Burst()
	for i := range burst {
		if _, err := send(c, "within"); err != nil {
			t.Fatalf("message %d of %d: %v", i+1, burst, err)
		}
	}
	_, err := send(c, "over")
	var reply *gosmtp.SMTPError
	if !errors.As(err, &reply) || reply.Code != 451 || reply.EnhancedCode != (gosmtp.EnhancedCode{4, 7, 0}) {
		t.Fatalf("over the limit: %v", err)
	}
	n, err := f.st.DB.NewSelect().Model((*store.Email)(nil)).Count(context.Background())
	if err != nil || int(n) != burst {
		t.Fatalf("%d emails stored (%v), want %d", n, err, burst)
	}
}

// An address given twice in RCPT TO, in any case, is one recipient, as the
// API counts it: not two deliveries and two events.
func TestRepeatedRecipientSentOnce(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	if err := c.Mail("billing@shop.example", nil); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"ada@rcpt.example", "bob@rcpt.example", "Ada@RCPT.example"} {
		if err := c.Rcpt(to, nil); err != nil {
			t.Fatalf("RCPT TO %s: %v", to, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("From: billing@shop.example\r\nTo: ada@rcpt.example, bob@rcpt.example\r\n\r\nHi.\r\n"))
	res, err := w.CloseWithResponse()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(res.StatusText, "2.0.0 queued as ")
	_, recipients, err := f.st.EmailInScope(context.Background(), store.EmailScope{OrganizationID: f.organizationID}, id)
	if err != nil || len(recipients) != 2 || recipients[0].Address != "ada@rcpt.example" || recipients[1].Address != "bob@rcpt.example" {
		t.Fatalf("recipients %+v, %v", recipients, err)
	}
}

// A second From field is refused, with the other fields RFC 5322 allows
// once: the From check reads the first, and the signature would cover a
// second one at any domain that a receiver might show instead.
func TestRepeatedHeaderFieldsRefused(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	for field, header := range map[string]string{
		"From":    "From: billing@shop.example\r\nFrom: ceo@bank.example\r\nTo: ada@rcpt.example\r\n",
		"Subject": "From: billing@shop.example\r\nSubject: a\r\nsubject: b\r\nTo: ada@rcpt.example\r\n",
	} {
		_, err := sendWithHeader(c, header)
		var reply *gosmtp.SMTPError
		if !errors.As(err, &reply) || reply.Code != 550 || reply.EnhancedCode != (gosmtp.EnhancedCode{5, 6, 0}) ||
			!strings.Contains(reply.Message, "more than one "+field+" field") {
			t.Errorf("two %s fields: %v, want 550 5.6.0 naming the field", field, err)
		}
	}
	if n, err := f.st.DB.NewSelect().Model((*store.Email)(nil)).Count(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d emails stored (%v), want none", n, err)
	}
	if _, err := sendWithHeader(c, "From: billing@shop.example\r\nTo: ada@rcpt.example\r\nBcc: a@x.example\r\nBcc: b@x.example\r\n"); err != nil {
		t.Fatalf("two Bcc fields, which are removed: %v", err)
	}
}

// A field name followed by white space before its colon ("From : x") is
// refused: net/textproto keeps it apart from "From", so the checks above
// would not see a second From at another domain that receivers read as one
// and the DKIM signature covers.
func TestSpaceBeforeColonRefused(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	for _, header := range []string{
		"From: billing@shop.example\r\nFrom : ceo@bank.example\r\nTo: ada@rcpt.example\r\n",
		"From : ceo@bank.example\r\nFrom: billing@shop.example\r\nTo: ada@rcpt.example\r\n",
		"From: billing@shop.example\r\nSubject: a\r\nSubject : b\r\nTo: ada@rcpt.example\r\n",
	} {
		_, err := sendWithHeader(c, header)
		var reply *gosmtp.SMTPError
		if !errors.As(err, &reply) || reply.Code != 550 || reply.EnhancedCode != (gosmtp.EnhancedCode{5, 6, 0}) {
			t.Errorf("%q: %v, want 550 5.6.0", header, err)
		}
	}
	if n, err := f.st.DB.NewSelect().Model((*store.Email)(nil)).Count(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d emails stored (%v), want none", n, err)
	}
}

// A header of more than 1,000 fields is refused before it is read into a
// map: 10 MiB of short fields would cost the process hundreds of megabytes.
func TestHeaderOfTooManyFieldsRefused(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	base := "From: billing@shop.example\r\nTo: ada@rcpt.example\r\n"
	many := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "X-F%d: v\r\n", i)
		}
		return b.String()
	}
	_, err := sendWithHeader(c, base+many(999))
	var reply *gosmtp.SMTPError
	if !errors.As(err, &reply) || reply.Code != 552 || reply.EnhancedCode != (gosmtp.EnhancedCode{5, 3, 4}) {
		t.Fatalf("1,001 fields: %v, want 552 5.3.4", err)
	}
	if _, err := sendWithHeader(c, base+many(998)); err != nil {
		t.Fatalf("1,000 fields: %v", err)
	}
}

// A line longer than RFC 5322's 998 characters is refused for good: a relay
// on the way would wrap it, breaking the DKIM signature, or refuse it.
// go-smtp's own limit lets lines of up to 1,998 through, and none in BDAT.
func TestLongLineRefused(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	for _, header := range []string{
		"From: billing@shop.example\r\nTo: ada@rcpt.example\r\n\r\n" + strings.Repeat("b", 999) + "\r\n",
		"From: billing@shop.example\r\nTo: ada@rcpt.example\r\nX-Long: " + strings.Repeat("h", 991) + "\r\n",
	} {
		_, err := sendWithHeader(c, header)
		var reply *gosmtp.SMTPError
		if !errors.As(err, &reply) || reply.Code != 550 || reply.EnhancedCode != (gosmtp.EnhancedCode{5, 6, 0}) ||
			!strings.Contains(reply.Message, "longer than 998") {
			t.Errorf("a line of 999 characters: %v, want 550 5.6.0 saying the line is too long", err)
		}
	}
	if n, err := f.st.DB.NewSelect().Model((*store.Email)(nil)).Count(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d emails stored (%v), want none", n, err)
	}
	if _, err := sendWithHeader(c, "From: billing@shop.example\r\nTo: ada@rcpt.example\r\n\r\n"+strings.Repeat("b", 998)+"\r\n"); err != nil {
		t.Fatalf("a line of 998 characters: %v", err)
	}
}

// A Subject or From display name that decodes (RFC 2047) to a control
// character is refused for good with 550 5.6.0, as the API refuses it with a
// 422: a NUL could never be stored, and the 451 it got before was retried
// for ever. TAB, which a header may hold, is kept. A recipient with a
// control character is refused at RCPT TO by ParseAddress.
func TestControlCharactersRefused(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	sendHeader := func(header string) error {
		_, err := sendWithHeader(c, header+"To: ada@rcpt.example\r\n")
		return err
	}
	for _, header := range []string{
		"From: billing@shop.example\r\nSubject: =?utf-8?q?a=00b?=\r\n",
		"From: =?utf-8?q?Bil=00l?= <billing@shop.example>\r\nSubject: s\r\n",
		"From: billing@shop.example\r\nSubject: =?utf-8?q?a=0D=0Ab?=\r\n",
	} {
		err := sendHeader(header)
		var reply *gosmtp.SMTPError
		if !errors.As(err, &reply) || reply.Code != 550 || reply.EnhancedCode != (gosmtp.EnhancedCode{5, 6, 0}) {
			t.Errorf("%q: %v, want 550 5.6.0", header, err)
		}
	}
	// A raw control character, or a line without a colon, makes the header
	// unreadable: the reply says so, not that a From is missing.
	for _, header := range []string{"From: billing@shop.example\r\nSubject: a\x01b\r\n", "From: billing@shop.example\r\nno colon\r\n"} {
		err := sendHeader(header)
		var reply *gosmtp.SMTPError
		if !errors.As(err, &reply) || reply.Code != 550 || !strings.Contains(reply.Message, "cannot be read") {
			t.Errorf("%q: %v, want 550 saying the header cannot be read", header, err)
		}
	}
	if err := c.Mail("billing@shop.example", nil); err != nil {
		t.Fatal(err)
	}
	var reply *gosmtp.SMTPError
	if err := c.Rcpt("a\x00da@rcpt.example", nil); !errors.As(err, &reply) || reply.Code != 501 || reply.EnhancedCode != (gosmtp.EnhancedCode{5, 1, 3}) {
		t.Errorf("RCPT TO with a NUL: %v, want 501 5.1.3", err)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := sendHeader("From: Bil\tl <billing@shop.example>\r\nSubject: =?utf-8?q?a=09b?=\r\n"); err != nil {
		t.Fatalf("with TABs: %v", err)
	}
	var stored []string
	if err := f.st.DB.NewSelect().Model((*store.Email)(nil)).Column("subject").Scan(context.Background(), &stored); err != nil ||
		len(stored) != 1 || stored[0] != "a\tb" {
		t.Fatalf("stored subjects %q, %v; want the message with TABs only", stored, err)
	}
}

// Invalid UTF-8 that encoded words decode to (or that SMTPUTF8 lets through
// raw) is shown as U+FFFD, and an overlong Subject (folded over lines of
// at most 998 characters, as RFC 5322 asks) is cut at the API's 998
// characters: before, a Subject of megabytes was stored and copied into
// every event and webhook. The message goes out as written.
func TestShownHeaderValuesAreStorable(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	longID := "<" + strings.Repeat("i", 900) + "@shop.example>"
	folded := strings.Repeat(strings.Repeat("s", 300)+"\r\n ", 5)
	reply, err := sendWithHeader(c, "From: =?UTF-8?Q?Caf=E9?= <billing@shop.example>\r\nTo: =?UTF-8?Q?J=F6?= <ada@rcpt.example>\r\n"+
		"Subject: =?UTF-8?Q?caf=E9?= "+folded+"end\r\nMessage-ID: "+longID+"\r\n")
	if err != nil {
		t.Fatalf("reply %q, %v", reply, err)
	}
	id := strings.TrimPrefix(reply, "2.0.0 queued as ")
	e, _, err := f.st.EmailInScope(context.Background(), store.EmailScope{OrganizationID: f.organizationID}, id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.Subject, "caf\uFFFD s") || utf8.RuneCountInString(e.Subject) != mailmsg.MaxSubject {
		t.Errorf("subject %q (%d characters)", e.Subject[:20], utf8.RuneCountInString(e.Subject))
	}
	if e.FromAddress != "Caf\uFFFD <billing@shop.example>" || len(e.To) != 1 || e.To[0] != "J\uFFFD <ada@rcpt.example>" {
		t.Errorf("from %q, to %q", e.FromAddress, e.To)
	}
	if e.MessageIDHeader == nil || *e.MessageIDHeader != longID {
		t.Errorf("message_id_header %v", e.MessageIDHeader)
	}
	var content []byte
	if err := f.st.DB.NewSelect().Model((*store.Email)(nil)).Column("content").Where("id = ?", id).Scan(context.Background(), &content); err != nil ||
		!bytes.Contains(content, []byte("Message-ID: "+longID+"\r\n")) || !bytes.Contains(content, []byte("Subject: =?UTF-8?Q?caf=E9?= ")) {
		t.Errorf("the message does not go out as written (%v)", err)
	}
}

// A key revoked while a transaction is open (after MAIL FROM, before the
// end of the data) stores and sends nothing: the client decides how long
// the transaction stays open. Before, the message was queued.
func TestKeyRevokedDuringTheTransaction(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	if err := c.Mail("billing@shop.example", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("ada@rcpt.example", nil); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.DB.NewUpdate().Model((*store.APIKey)(nil)).Set("status = ?", store.KeyRevoked).
		Where("username = ?", f.user).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("From: billing@shop.example\r\nTo: ada@rcpt.example\r\n\r\nHi.\r\n"))
	var reply *gosmtp.SMTPError
	if _, err := w.CloseWithResponse(); !errors.As(err, &reply) || reply.Code != 535 {
		t.Fatalf("the data after the key was revoked: %v, want 535", err)
	}
	if n, err := f.st.DB.NewSelect().Model((*store.Email)(nil)).Count(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d emails stored (%v), want none", n, err)
	}
}

// A MAIL FROM inside an open transaction is refused with 503, and the
// transaction stays as it was: before, a second MAIL refused because the
// key had been revoked left the first one's domain and recipients in place,
// and DATA then read the key it had dropped.
func TestNestedMailRefused(t *testing.T) {
	f := newFixture(t, config.RateLimit{})
	c := f.login(t, sasl.NewPlainClient("", f.user, f.secret))
	if err := c.Mail("billing@shop.example", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("ada@rcpt.example", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.DB.NewUpdate().Model((*store.APIKey)(nil)).Set("status = ?", store.KeyRevoked).
		Where("username = ?", f.user).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	var reply *gosmtp.SMTPError
	if err := c.Mail("billing@shop.example", nil); !errors.As(err, &reply) || reply.Code != 503 || reply.EnhancedCode != (gosmtp.EnhancedCode{5, 5, 1}) {
		t.Fatalf("nested MAIL: %v, want 503 5.5.1", err)
	}
	// After RSET, the revoked key is refused.
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("billing@shop.example", nil); !errors.As(err, &reply) || reply.Code != 535 {
		t.Fatalf("MAIL with the revoked key: %v, want 535", err)
	}
	if err := c.Rcpt("ada@rcpt.example", nil); !errors.As(err, &reply) || reply.Code/100 != 5 {
		t.Fatalf("RCPT without a transaction: %v, want it refused", err)
	}
}
