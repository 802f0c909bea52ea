package inbound_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/inbound"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

// emailQueries counts the queries that read the emails table.
type emailQueries struct{ n atomic.Int64 }

func (q *emailQueries) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (q *emailQueries) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if strings.Contains(e.Query, `FROM "emails"`) {
		q.n.Add(1)
	}
}

// fixture is an inbound server on a fresh database with one domain, whose
// emails the test creates with email.
type fixture struct {
	t       *testing.T
	st      *store.Store
	tags    *bouncetag.Tagger
	tokens  *tracktoken.Keys
	domain  *store.Domain
	queries *emailQueries
	addr    string
}

func newFixture(t *testing.T, databaseURL string) *fixture {
	t.Helper()
	ctx := context.Background()
	st := testenv.OpenStore(t, databaseURL)
	tags, _ := bouncetag.New(bytes.Repeat([]byte{3}, 32))
	_, row, err := keyauth.New("boot", "boot", store.Permissions{"admin"})
	if err != nil {
		t.Fatal(err)
	}
	org, err := st.CreateOrganizationWithKey(ctx, "shop", row)
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	q := &emailQueries{}
	st.DB = st.DB.WithQueryHook(q)
	dead, _ := client.NewLazyClient(client.Options{HostPort: testenv.FreeAddr(t)})
	t.Cleanup(dead.Close)
	tokens, _ := tracktoken.New(bytes.Repeat([]byte{3}, 32))
	addr := serve(t, &inbound.Backend{Store: st, Temporal: dead, Tags: tags, Tokens: tokens, BounceHost: "bounces.example", Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	return &fixture{t: t, st: st, tags: tags, tokens: tokens, domain: d, queries: q, addr: addr}
}

// email stores an accepted email with id and envelope sender.
func (f *fixture) email(id, sender string) {
	f.t.Helper()
	ctx := context.Background()
	if err := f.st.CreateEmail(ctx, &store.Email{ID: id, OrganizationID: f.domain.OrganizationID, DomainID: f.domain.ID, FromAddress: "a@shop.example", Subject: "s"}, []string{"ada@rcpt.example"}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.st.AcceptEmail(ctx, id, store.Acceptance{EnvelopeSender: sender, Recipients: 1}); err != nil {
		f.t.Fatal(err)
	}
}

// idAt is a UUIDv7 with the creation time at.
func idAt(at time.Time) string {
	u := uuid.Must(uuid.NewV7())
	ms := at.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u.String()
}

// conn is an SMTP connection spoken by hand.
type conn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (f *fixture) dial() *conn {
	f.t.Helper()
	c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	k := &conn{t: f.t, c: c, r: bufio.NewReader(c)}
	k.expect("220 ")
	k.cmd("EHLO client.example", "250 ")
	k.cmd("MAIL FROM:<>", "250 ")
	return k
}

// cmd sends line and fails unless the reply starts with want.
func (k *conn) cmd(line, want string) {
	k.t.Helper()
	if _, err := k.c.Write([]byte(line + "\r\n")); err != nil {
		k.t.Fatal(err)
	}
	if got := k.expect(want); got == "" {
		k.t.Fatalf("%s: no reply", line)
	}
}

func (k *conn) expect(want string) string {
	k.t.Helper()
	for {
		line, err := k.r.ReadString('\n')
		if err != nil {
			k.t.Fatalf("reading a reply: %v", err)
		}
		if len(line) > 3 && line[3] == '-' {
			continue
		}
		if !strings.HasPrefix(line, want) {
			k.t.Fatalf("reply %q, want %q", line, want)
		}
		return line
	}
}

// Made-up addresses cost no query, an untagged one included unless its id
// dates from before tags; after maxRefused refusals the connection gets
// 421 and is closed.
func TestRefusedRecipientsAreBoundedAndCheap(t *testing.T) {
	f := newFixture(t, testenv.PostgresURL(t))
	later := idAt(time.Now().Add(3 * time.Hour)) // after tags began, with any clock skew
	f.email(later, bouncetag.Untagged(later, "mail.shop.example"))
	k := f.dial()
	for _, to := range []string{
		bouncetag.Untagged(later, "mail.shop.example"),
		bouncetag.Untagged(idAt(time.Now().Add(5*time.Hour)), "mail.shop.example"),
		bouncetag.Untagged(uuid.NewString(), "mail.shop.example"), // not a UUIDv7
		bouncetag.Untagged(uuid.NewString(), "mail.shop.example"),
		f.tags.Sender(later, "mail.shop.example")[:len("bounces+")+37] + "aaaaaaaa@mail.shop.example", // forged tag
		"postmaster@mail.shop.example",
		"someone@bounces.example",
		"unsubscribe+no%token@bounces.example",
	} {
		k.cmd("RCPT TO:<"+to+">", "550 5.1.1 ")
	}
	if n := f.queries.n.Load(); n != 0 {
		t.Fatalf("made-up addresses cost %d queries of emails", n)
	}
	// An untagged address that may be an email's from before tags is looked up.
	k.cmd("RCPT TO:<"+bouncetag.Untagged(idAt(time.Now().Add(-24*time.Hour)), "mail.shop.example")+">", "550 5.1.1 ")
	if n := f.queries.n.Load(); n != 1 {
		t.Fatalf("an untagged address of before tags cost %d queries, want 1", n)
	}
	k.cmd("RCPT TO:<nobody@bounces.example>", "550 5.1.1 ") // the tenth refusal
	k.cmd("RCPT TO:<fbl@bounces.example>", "421 4.7.0 ")
	k.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := k.r.ReadString('\n'); err == nil {
		t.Fatalf("after the 421: %q", rest)
	}
	if n := f.queries.n.Load(); n != 1 {
		t.Fatalf("%d queries in all", n)
	}

	// A new connection starts afresh. An unsubscribe address is taken only
	// with a token Mailyard minted (in any case), not with one of its shape.
	k = f.dial()
	k.cmd("RCPT TO:<fbl@bounces.example>", "250 ")
	k.cmd("RCPT TO:<unsubscribe+"+strings.Repeat("a", 40)+"@bounces.example>", "550 5.1.1 ")
	token := f.tokens.MustMint(tracktoken.Token{Kind: tracktoken.Unsubscribe, EmailID: uuid.Must(uuid.NewV7()), Recipient: 3})
	k.cmd("RCPT TO:<unsubscribe+"+strings.ToUpper(token)+"@bounces.example>", "250 ")
}

// The time tags began is read from SQLite too (mailyard dev).
func TestUntaggedOnSQLite(t *testing.T) {
	f := newFixture(t, testenv.SQLiteURL(t))
	old := idAt(time.Now().Add(-24 * time.Hour))
	f.email(old, bouncetag.Untagged(old, "mail.shop.example"))
	later := idAt(time.Now().Add(3 * time.Hour))
	f.email(later, bouncetag.Untagged(later, "mail.shop.example"))
	f.dial().cmd("RCPT TO:<"+bouncetag.Untagged(old, "mail.shop.example")+">", "250 ")
	f.dial().cmd("RCPT TO:<"+bouncetag.Untagged(later, "mail.shop.example")+">", "550 5.1.1 ")
}

// Each recipient's own return path is accepted as the email's; one whose
// position, tag or domain was changed is refused, and so is one made from
// an email from before tags, which has no per-recipient return paths.
func TestRecipientReturnPaths(t *testing.T) {
	f := newFixture(t, testenv.PostgresURL(t))
	id := uuid.Must(uuid.NewV7()).String()
	f.email(id, f.tags.Sender(id, "mail.shop.example"))
	first, _ := f.tags.RecipientSender(f.tags.Sender(id, "mail.shop.example"), 0)
	second, _ := f.tags.RecipientSender(f.tags.Sender(id, "mail.shop.example"), 1)
	k := f.dial()
	k.cmd("RCPT TO:<"+first+">", "250 ")
	k.cmd("RCPT TO:<"+strings.ToUpper(second)+">", "250 ")
	k.cmd("DATA", "354 ")
	k.cmd("Subject: report\r\n\r\nfor the first two\r\n.", "250 ")
	var got store.InboundMessage
	if err := f.st.DB.NewSelect().Model(&got).Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.EmailID == nil || *got.EmailID != id || len(got.Recipients) != 2 {
		t.Fatalf("stored %+v", got)
	}

	local, _, _ := strings.Cut(first, "@")
	tag := local[len(local)-8:]
	untagged := uuid.Must(uuid.NewV7()).String()
	f.email(untagged, bouncetag.Untagged(untagged, "mail.shop.example"))
	other, _ := bouncetag.New(bytes.Repeat([]byte{9}, 32))
	forgedKey, _ := other.RecipientSender(other.Sender(id, "mail.shop.example"), 0)
	// Well formed, but the email was sent with its untagged sender.
	ofUntagged, _ := f.tags.RecipientSender(f.tags.Sender(untagged, "mail.shop.example"), 0)
	for _, addr := range []string{
		"bounces+" + id + ".1." + tag + "@mail.shop.example", // the first's tag, the second's position
		"bounces+" + id + ".0." + tag + "@other.example",     // another domain
		forgedKey, // another installation's key
		ofUntagged,
	} {
		f.dial().cmd("RCPT TO:<"+addr+">", "550 5.1.1 ")
	}
	if pos, ok := f.tags.RecipientSender(bouncetag.Untagged(untagged, "mail.shop.example"), 0); ok {
		t.Fatalf("an email from before tags has a recipient return path %q", pos)
	}
}

// A message names at most one email: a second email's return path in the
// same transaction is deferred with 452, so that no email's report is
// applied to another; it goes through in a transaction of its own.
func TestOneEmailPerMessage(t *testing.T) {
	f := newFixture(t, testenv.PostgresURL(t))
	a, b := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	f.email(a, f.tags.Sender(a, "mail.shop.example"))
	f.email(b, f.tags.Sender(b, "mail.shop.example"))
	k := f.dial()
	k.cmd("RCPT TO:<"+f.tags.Sender(a, "mail.shop.example")+">", "250 ")
	k.cmd("RCPT TO:<"+f.tags.Sender(b, "mail.shop.example")+">", "452 4.5.3 ")
	k.cmd("RCPT TO:<"+strings.ToUpper(f.tags.Sender(a, "mail.shop.example"))+">", "250 ")
	k.cmd("RCPT TO:<fbl@bounces.example>", "250 ")
	k.cmd("DATA", "354 ")
	k.cmd("Subject: report\r\n\r\nfor a\r\n.", "250 ")
	k.cmd("MAIL FROM:<>", "250 ")
	k.cmd("RCPT TO:<"+f.tags.Sender(b, "mail.shop.example")+">", "250 ")
	k.cmd("DATA", "354 ")
	k.cmd("Subject: report\r\n\r\nfor b\r\n.", "250 ")

	var got []store.InboundMessage
	if err := f.st.DB.NewSelect().Model(&got).Order("id").Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].EmailID == nil || *got[0].EmailID != a || len(got[0].Recipients) != 3 ||
		got[1].EmailID == nil || *got[1].EmailID != b || len(got[1].Recipients) != 1 {
		t.Fatalf("stored %+v", got)
	}
}

// A stop with an idle client connected is an ordinary one: the client gets
// 421 and Serve returns nil without waiting for the client.
func TestStopWithAnIdleClient(t *testing.T) {
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	tags, _ := bouncetag.New(bytes.Repeat([]byte{4}, 32))
	dead, _ := client.NewLazyClient(client.Options{HostPort: testenv.FreeAddr(t)})
	defer dead.Close()
	b := &inbound.Backend{Store: st, Temporal: dead, Tags: tags, BounceHost: "bounces.example", Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- b.Serve(ctx, inbound.Listener{Addr: "127.0.0.1:0", SweepEvery: time.Hour}, func(a string) { ready <- a })
	}()
	c, err := net.DialTimeout("tcp", <-ready, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "220 ") {
		t.Fatalf("greeting %q, %v", line, err)
	}
	cancel()
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "421 ") {
		t.Fatalf("at the stop: %q, %v", line, err)
	}
	// Before, Shutdown waited its 15 s for the client to leave and Serve
	// returned context.DeadlineExceeded.
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// An address with a control character (or, as a sender, bytes that are not
// UTF-8) is refused for good: go-smtp takes any byte, a quoted NUL too, and a NUL in MAIL FROM could never be stored
// (the message got 451 on every retry). A recipient that is a stored
// envelope sender but for a trailing control character (which
// store.SameAddress trims) is refused too; the refusal counts toward
// maxRefused.
func TestControlCharactersInAddresses(t *testing.T) {
	f := newFixture(t, testenv.PostgresURL(t))
	id := uuid.Must(uuid.NewV7()).String()
	sender := f.tags.Sender(id, "mail.shop.example")
	f.email(id, sender)
	k := f.dial()
	k.cmd("RSET", "250 ")
	for _, from := range []string{"a\x00b@isp.example", "\"a\x00b\"@isp.example", "\"a\\\x00b\"@isp.example", "a@isp.example\x0b", "a\xffb@isp.example"} {
		k.cmd("MAIL FROM:<"+from+">", "501 5.1.7 ")
		k.cmd("RCPT TO:<fbl@bounces.example>", "502 ") // no sender: nothing to store
	}
	k.cmd("MAIL FROM:<ok@isp.example>", "250 ")
	for _, to := range []string{sender + "\x0b", sender + "\u0085", sender + "\u00a0", sender + "\u3000", "fbl@bounces.example\x00", "\"fbl\x00\"@bounces.example"} {
		k.cmd("RCPT TO:<"+to+">", "501 5.1.3 ")
	}
	k.cmd("RCPT TO:<"+sender+">", "250 ")
	k.cmd("DATA", "354 ")
	k.cmd("Subject: report\r\n\r\nbody\r\n.", "250 ")

	var got []store.InboundMessage
	if err := f.st.DB.NewSelect().Model(&got).Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].MailFrom != "ok@isp.example" || len(got[0].Recipients) != 1 || got[0].Recipients[0] != sender {
		t.Fatalf("stored %+v", got)
	}
}
