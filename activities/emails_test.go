package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/internal/tracktoken"
	"github.com/mailyard/mailyard/workflows/email"
)

// relay is the SMTP relay of the sending tests: a real go-smtp server on
// loopback that keeps each message's envelope, and runs afterData once a
// message is taken.
type relay struct {
	mu        sync.Mutex
	taken     []string // "<MAIL FROM> <RCPT TO>" of each message
	afterData func(rcpt string)
}

func (r *relay) NewSession(*smtp.Conn) (smtp.Session, error) { return &relaySession{r: r}, nil }

type relaySession struct {
	r        *relay
	from, to string
}

func (s *relaySession) Mail(from string, _ *smtp.MailOptions) error { s.from = from; return nil }
func (s *relaySession) Rcpt(to string, _ *smtp.RcptOptions) error   { s.to = to; return nil }
func (s *relaySession) Data(r io.Reader) error {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	s.r.mu.Lock()
	s.r.taken = append(s.r.taken, s.from+" "+s.to)
	s.r.mu.Unlock()
	if s.r.afterData != nil {
		s.r.afterData(s.to)
	}
	return nil
}
func (s *relaySession) Reset()        {}
func (s *relaySession) Logout() error { return nil }

// sendingFixture is a sending domain with its DKIM key on PostgreSQL, and
// the email activities sending through the relay.
type sendingFixture struct {
	st       *store.Store
	a        *activities.Emails
	relay    *relay
	tags     *bouncetag.Tagger
	org      int64
	domainID int64
}

func newSendingFixture(t *testing.T) *sendingFixture {
	t.Helper()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	box, _ := secrets.New(make([]byte, 32))
	tags, _ := bouncetag.New(make([]byte, 32))
	tokens, _ := tracktoken.New(make([]byte, 32))

	r := &relay{}
	server := smtp.NewServer(r)
	server.Domain = "relay.example"
	sender, err := smtpsend.New(smtpsend.Config{Mode: smtpsend.ModeRelay, Relay: testenv.ServeSMTP(t, server), HELO: "mailyard.test"})
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Emails{Store: st, Box: box, Tags: tags, Sender: sender,
		Links: &tracking.Links{Keys: tokens, BounceHost: "bounces.example"}, TrackingURL: "https://t.example"}
	org, err := st.CreateOrganizationWithKey(context.Background(), "acme", &store.APIKey{Label: "b", Username: "b", Prefix: "p", Digest: []byte("d"), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	return &sendingFixture{st: st, a: a, relay: r, tags: tags, org: org.ID, domainID: testenv.SigningDomain(t, st, box, org.ID, "shop.example")}
}

// newEmail stores an email as the API does, opens and clicks tracked or
// not, and returns its id.
func (f *sendingFixture) newEmail(t *testing.T, req mailmsg.Request, tracked bool) string {
	t.Helper()
	msg, problems := mailmsg.Validate(req, "shop.example")
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	content, _ := json.Marshal(msg)
	id := uuid.Must(uuid.NewV7()).String()
	e := &store.Email{ID: id, OrganizationID: f.org, DomainID: f.domainID, FromAddress: msg.From.Address,
		Subject: req.Subject, Content: content, TrackOpens: tracked, TrackClicks: tracked}
	if err := f.st.CreateEmail(context.Background(), e, msg.Recipients()); err != nil {
		t.Fatal(err)
	}
	return id
}

// A tracked email's recipients each get their own message, read as their
// transaction begins, and their own return path. A message that cannot be
// read then (here: erased under the step) is not sent, and nothing is
// recorded for its recipient: the step fails, so Temporal runs it again,
// after recording the recipient that was sent to.
func TestFirstAttemptReadsEachTrackedMessageWhenSending(t *testing.T) {
	ctx := context.Background()
	f := newSendingFixture(t)
	st, a, r, tags := f.st, f.a, f.relay, f.tags
	id := f.newEmail(t, mailmsg.Request{From: "news@shop.example", To: []string{"ada@rcpt.example", "bob@rcpt.example"},
		Subject: "Sale", HTML: "<p>Our <a href=\"https://shop.example/sale\">sale</a></p>"}, true)

	// Once ada@'s message is taken, bob@'s is erased before its turn.
	r.afterData = func(rcpt string) {
		if rcpt == "ada@rcpt.example" {
			if _, err := st.DB.NewUpdate().Model((*store.EmailRecipient)(nil)).Set("signed_message = NULL").
				Where("email_id = ?", id).Where("position = 1").Exec(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	_, err := a.FirstAttempt(ctx, email.FirstAttemptInput{EmailID: id, Send: true})
	if err == nil || !strings.Contains(err.Error(), "recipient 1's message was erased") {
		t.Fatalf("FirstAttempt: %v, want the unread message's error", err)
	}
	adaPath, _ := tags.RecipientSender(tags.Sender(id, "mail.shop.example"), 0)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.taken) != 1 || r.taken[0] != adaPath+" ada@rcpt.example" {
		t.Fatalf("the relay took %q, want ada@'s message from %s only", r.taken, adaPath)
	}
	rs, err := st.EmailRecipients(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Status != store.RecipientDelivered || rs[1].Status != store.RecipientQueued || rs[1].Attempts != 0 {
		t.Fatalf("recipients after the step: %+v", rs)
	}
}

// The prepare-and-attempt step, run as the regular activity it goes on as
// when its local tries fail, heartbeats like an attempt: an SMTP exchange
// longer than the heartbeat timeout is not cut off and made again.
func TestFirstAttemptHeartbeatsAsARegularActivity(t *testing.T) {
	ctx := context.Background()
	f := newSendingFixture(t)
	id := f.newEmail(t, mailmsg.Request{From: "news@shop.example", To: []string{"ada@rcpt.example"}, Subject: "Slow", Text: "Hi."}, false)
	f.relay.afterData = func(string) { time.Sleep(4 * time.Second) }

	tc, err := client.Dial(client.Options{HostPort: testenv.OwnTemporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	const queue = "first-attempt-heartbeat"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	w.RegisterActivityWithOptions(f.a.FirstAttempt, activity.RegisterOptions{Name: email.FirstAttemptActivity})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in email.FirstAttemptInput) (email.FirstAttemptResult, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		var out email.FirstAttemptResult
		err := workflow.ExecuteActivity(ctx, email.FirstAttemptActivity, in).Get(ctx, &out)
		return out, err
	}, workflow.RegisterOptions{Name: "RegularFirstAttempt"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, "RegularFirstAttempt", email.FirstAttemptInput{EmailID: id, Send: true})
	if err != nil {
		t.Fatal(err)
	}
	var out email.FirstAttemptResult
	if err := run.Get(ctx, &out); err != nil || !out.Attempted || out.Attempt.Delivered != 1 {
		t.Fatalf("result %+v, %v", out, err)
	}
	f.relay.mu.Lock()
	defer f.relay.mu.Unlock()
	if len(f.relay.taken) != 1 {
		t.Fatalf("the relay took %d messages, want 1", len(f.relay.taken))
	}
}

// cancelOnQuery cancels a context when a statement holding all of the
// fragments is about to run.
type cancelOnQuery struct {
	fragments []string
	cancel    context.CancelFunc
}

func (h *cancelOnQuery) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	for _, f := range h.fragments {
		if !strings.Contains(e.Query, f) {
			return ctx
		}
	}
	h.cancel()
	return ctx
}

func (h *cancelOnQuery) AfterQuery(context.Context, *bun.QueryEvent) {}

// An attempt whose context ends after a server took a recipient's message
// (here: as the next recipient's message is read) still records that 250,
// so the next attempt does not send it again; the recipient that got no
// answer is left to the next attempt, and the step fails. Before, nothing
// was recorded and ada@ got the email twice.
func TestAttemptRecordsAnswersAfterItsContextEnded(t *testing.T) {
	f := newSendingFixture(t)
	id := f.newEmail(t, mailmsg.Request{From: "news@shop.example", To: []string{"ada@rcpt.example", "bob@rcpt.example"},
		Subject: "Sale", HTML: "<p>Our <a href=\"https://shop.example/sale\">sale</a></p>"}, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.st.DB = f.st.DB.WithQueryHook(&cancelOnQuery{fragments: []string{"SELECT", "signed_message", "position = 1"}, cancel: cancel})

	if _, err := f.a.FirstAttempt(ctx, email.FirstAttemptInput{EmailID: id, Send: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("FirstAttempt: %v, want the context's end", err)
	}
	rs, err := f.st.EmailRecipients(context.Background(), id)
	if err != nil || rs[0].Status != store.RecipientDelivered || rs[1].Status != store.RecipientQueued || rs[1].Attempts != 0 {
		t.Fatalf("recipients after the ended attempt: %+v, %v", rs, err)
	}
	res, err := f.a.Attempt(context.Background(), email.AttemptInput{EmailID: id, Attempt: 2})
	if err != nil || res.Delivered != 1 || res.Pending != 0 {
		t.Fatalf("the next attempt: %+v, %v", res, err)
	}
	f.relay.mu.Lock()
	defer f.relay.mu.Unlock()
	if len(f.relay.taken) != 2 || !strings.HasSuffix(f.relay.taken[0], " ada@rcpt.example") || !strings.HasSuffix(f.relay.taken[1], " bob@rcpt.example") {
		t.Fatalf("the relay took %q, want ada@'s message once, then bob@'s", f.relay.taken)
	}
}

// Every attempt asks the suppression list: a recipient whose address was
// suppressed while it waited for its retry (here: after the prepare step,
// by a complaint about another email) is not sent to, and ends
// suppressed. Before, only the prepare step asked.
func TestAttemptSkipsAnAddressSuppressedMeanwhile(t *testing.T) {
	ctx := context.Background()
	f := newSendingFixture(t)
	id := f.newEmail(t, mailmsg.Request{From: "news@shop.example", To: []string{"ada@rcpt.example", "bob@rcpt.example"},
		Subject: "Sale", Text: "Our sale"}, false)
	if res, err := f.a.FirstAttempt(ctx, email.FirstAttemptInput{EmailID: id}); err != nil || res.Pending != 2 || res.Attempted {
		t.Fatalf("prepare: %+v, %v", res, err)
	}
	if err := store.Suppress(ctx, f.st.DB, f.org, "bob@rcpt.example", store.SuppressionComplaint); err != nil {
		t.Fatal(err)
	}
	res, err := f.a.Attempt(ctx, email.AttemptInput{EmailID: id, Attempt: 2})
	if err != nil || res.Delivered != 1 || res.Bounced != 1 || res.Pending != 0 {
		t.Fatalf("the attempt: %+v, %v", res, err)
	}
	rs, err := f.st.EmailRecipients(ctx, id)
	if err != nil || rs[0].Status != store.RecipientDelivered || rs[1].Status != store.RecipientSuppressed {
		t.Fatalf("recipients: %+v, %v", rs, err)
	}
	f.relay.mu.Lock()
	defer f.relay.mu.Unlock()
	if len(f.relay.taken) != 1 || !strings.HasSuffix(f.relay.taken[0], " ada@rcpt.example") {
		t.Fatalf("the relay took %q, want ada@'s message only", f.relay.taken)
	}
}

// An answer that cannot be recorded does not keep the others from being
// recorded: the step fails, and Temporal's next try sends only to the
// recipient whose answer is missing. Before, the recording stopped at the
// first error, and every later recipient's 250 was sent again.
func TestAttemptRecordsEveryAnswerItCan(t *testing.T) {
	ctx := context.Background()
	f := newSendingFixture(t)
	id := f.newEmail(t, mailmsg.Request{From: "news@shop.example", To: []string{"ada@rcpt.example", "bob@rcpt.example"},
		Subject: "Sale", Text: "Our sale"}, false)
	if res, err := f.a.FirstAttempt(ctx, email.FirstAttemptInput{EmailID: id}); err != nil || res.Pending != 2 {
		t.Fatalf("prepare: %+v, %v", res, err)
	}
	for _, stmt := range []string{
		`CREATE FUNCTION refuse_ada() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'cannot record ada'; END $$`,
		`CREATE TRIGGER refuse_ada BEFORE UPDATE ON email_recipients FOR EACH ROW
			WHEN (NEW.address = 'ada@rcpt.example' AND NEW.status = 'delivered') EXECUTE FUNCTION refuse_ada()`,
	} {
		if _, err := f.st.DB.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.a.Attempt(ctx, email.AttemptInput{EmailID: id, Attempt: 2}); err == nil || !strings.Contains(err.Error(), "cannot record ada") {
		t.Fatalf("the attempt: %v, want ada's recording error", err)
	}
	rs, err := f.st.EmailRecipients(ctx, id)
	if err != nil || rs[0].Status != store.RecipientQueued || rs[1].Status != store.RecipientDelivered {
		t.Fatalf("recipients: %+v, %v; want ada queued and bob delivered", rs, err)
	}
}
