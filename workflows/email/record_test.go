package email_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/mailyard/mailyard/activities"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/dnscheck"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/worker"
	"github.com/mailyard/mailyard/workflows/email"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// mx is the recipients' mail server: a real SMTP server on loopback. A
// recipient whose local part starts with "reject" is refused (550), "later"
// is deferred (451) the first time, "defer" every time; the others are
// accepted.
type mx struct {
	mu    sync.Mutex
	rcpts map[string]int
}

func (m *mx) NewSession(*smtp.Conn) (smtp.Session, error) { return &mxSession{mx: m}, nil }

type mxSession struct{ mx *mx }

func (s *mxSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *mxSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.mx.mu.Lock()
	defer s.mx.mu.Unlock()
	s.mx.rcpts[to]++
	switch {
	case strings.HasPrefix(to, "reject"):
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}
	case strings.HasPrefix(to, "later") && s.mx.rcpts[to] == 1, strings.HasPrefix(to, "defer"):
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 7, 1}, Message: "try again later"}
	}
	return nil
}
func (s *mxSession) Data(r io.Reader) error { _, err := io.Copy(io.Discard, r); return err }
func (s *mxSession) Reset()                 {}
func (s *mxSession) Logout() error          { return nil }

// TestRecordHistories runs each scenario on the dev server with the real
// activities, PostgreSQL, DNS and an SMTP server, and writes its history
// into testdata/ for the replay tests. It runs only when asked to
// (MAILYARD_RECORD_HISTORIES=1), after a deliberate, versioned change.
//
// With MAILYARD_RECORD_RARE=before (on the code before a change that only
// some runs meet) or =after (on the code with it), it records instead the
// rare scenarios, those runs, as email-delivery-rare-<before|after>-*.json.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("MAILYARD_RECORD_HISTORIES") != "1" {
		t.Skip("set MAILYARD_RECORD_HISTORIES=1 to record replay histories")
	}
	rare := os.Getenv("MAILYARD_RECORD_RARE")
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	box, _ := secrets.New(make([]byte, 32))
	tags, _ := bouncetag.New(make([]byte, 32))

	server := smtp.NewServer(&mx{rcpts: map[string]int{}})
	server.Domain = "mx.rcpt.example"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.Serve(l) }()
	defer server.Close()
	zone := testenv.StartDNSZone(t)
	zone.Add(t, "rcpt.example. 60 IN MX 10 mx.rcpt.example.")
	zone.Add(t, "mx.rcpt.example. 60 IN A 127.0.0.1")
	resolver, err := dnscheck.New(zone.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sender, err := smtpsend.New(smtpsend.Config{Mode: smtpsend.ModeMX, Port: l.Addr().(*net.TCPAddr).Port,
		HELO: "mailyard.record.example", AllowPrivateNetworks: true, Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}

	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	w := sdkworker.New(tc, email.TaskQueue, sdkworker.Options{})
	acts := &activities.Emails{Store: st, Box: box, Tags: tags, Sender: sender, Runs: &deliveryruns.Runs{Temporal: tc, Store: st}}
	worker.RegisterEmails(w, acts)
	// The prepare-and-attempt step fails its local tries for the emails
	// in failLocal, as it would with the database down, and works as the
	// regular activity it goes on as.
	var failLocal sync.Map
	w.RegisterActivityWithOptions(func(ctx context.Context, in email.FirstAttemptInput) (email.FirstAttemptResult, error) {
		if _, fail := failLocal.Load(in.EmailID); fail && activity.GetInfo(ctx).IsLocalActivity {
			return email.FirstAttemptResult{}, errors.New("the database is down")
		}
		return acts.FirstAttempt(ctx, in)
	}, activity.RegisterOptions{Name: email.FirstAttemptActivity, DisableAlreadyRegisteredCheck: true})
	// The reschedule step to slowAt takes 2 s, so that a reschedule sent
	// after it commits first.
	slowAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	w.RegisterActivityWithOptions(func(ctx context.Context, in email.RescheduleActivityInput) error {
		if in.ScheduledAt.Equal(slowAt) {
			time.Sleep(2 * time.Second)
		}
		return acts.Reschedule(ctx, in)
	}, activity.RegisterOptions{Name: email.RescheduleActivity, DisableAlreadyRegisteredCheck: true})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	org, err := st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "b", Username: "b", Prefix: "p", Digest: []byte("d"), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	domain := testenv.SigningDomain(t, st, box, org.ID, "shop.example")
	if err := store.Suppress(ctx, st.DB, org.ID, "gone@rcpt.example", store.SuppressionHardBounce); err != nil {
		t.Fatal(err)
	}

	short := []time.Duration{0, time.Second, time.Second}
	type scenario struct {
		name     string
		to       []string
		schedule []time.Duration
		noEmail  bool
		// at, when set, schedules the email this long after its start.
		at     time.Duration
		during func(id string)
		// failLocal fails the local tries of the first step.
		failLocal bool
		want      email.Result
		// canceled: the run ends canceled, without a result.
		canceled bool
	}
	scenarios := []scenario{
		{name: "delivered", to: []string{"ada@rcpt.example", "bob@rcpt.example"}, schedule: short, want: email.Result{Status: email.StatusSent, Attempts: 1}},
		{name: "deferred-then-delivered", to: []string{"later@rcpt.example", "cy@rcpt.example"}, schedule: short, want: email.Result{Status: email.StatusSent, Attempts: 2}},
		{name: "hard-bounce", to: []string{"reject@rcpt.example"}, schedule: short, want: email.Result{Status: email.StatusSent, Attempts: 1}},
		{name: "soft-bounce-after-last-attempt", to: []string{"defer@rcpt.example"}, schedule: []time.Duration{0, time.Second}, want: email.Result{Status: email.StatusSent, Attempts: 2}},
		{name: "all-suppressed", to: []string{"gone@rcpt.example"}, schedule: short, want: email.Result{Status: email.StatusSent, Attempts: 0}},
		// The production schedule in the input; everything is delivered
		// by the first attempt, so the run ends at once.
		{name: "production-schedule", to: []string{"dee@rcpt.example"}, schedule: email.DefaultSchedule, want: email.Result{Status: email.StatusSent, Attempts: 1}},
		// The local first step fails its tries and goes on as a regular
		// activity (local-step-fallback).
		{name: "local-step-failed", to: []string{"hal@rcpt.example"}, schedule: short, failLocal: true, want: email.Result{Status: email.StatusSent, Attempts: 1}},
		// The API removed the email after it could not confirm the start.
		{name: "gone", noEmail: true, schedule: short, want: email.Result{Status: email.StatusGone}},
		// Last: the domain is deleted between the first attempt and the
		// second, which bounces the recipient without sending.
		{name: "domain-deleted", to: []string{"defer2@rcpt.example"}, schedule: []time.Duration{0, 3 * time.Second, 3 * time.Second},
			during: func(string) {
				time.Sleep(time.Second)
				if _, err := st.DeleteDomainForCustomer(ctx, org.ID, domain); err != nil {
					t.Error(err)
				}
			},
			want: email.Result{Status: email.StatusSent, Attempts: 2}},
	}
	// Scheduled sending (version 1 of scheduled-send): sent at its time,
	// moved by the reschedule update, ended by the cancel update.
	update := func(name string, args ...any) func(string) {
		return func(id string) {
			h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: email.WorkflowID(id), UpdateName: name, Args: args,
				WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				err = h.Get(ctx, nil)
			}
			if err != nil {
				t.Errorf("update %s: %v", name, err)
			}
		}
	}
	scenarios = append([]scenario{
		{name: "scheduled", to: []string{"eve@rcpt.example"}, schedule: short, at: 2 * time.Second, want: email.Result{Status: email.StatusSent, Attempts: 1}},
		{name: "rescheduled", to: []string{"fay@rcpt.example"}, schedule: short, at: time.Hour,
			during: update(email.RescheduleUpdate, email.RescheduleInput{ScheduledAt: time.Now().Add(3 * time.Second)}),
			want:   email.Result{Status: email.StatusSent, Attempts: 1}},
		{name: "canceled", to: []string{"gus@rcpt.example"}, schedule: short, at: time.Hour, during: update(email.CancelUpdate),
			want: email.Result{Status: email.StatusCanceled}},
	}, scenarios...)
	if rare != "" {
		// Two reschedules whose steps commit in the other order
		// (reschedules-in-order), a run canceled through Temporal while
		// the email waits (canceled-run-cancels-email), and one canceled
		// while its recipient waits for the next attempt
		// (canceled-run-erases-email).
		scenarios = []scenario{
			{name: "reschedules-out-of-order", to: []string{"ida@rcpt.example"}, schedule: short, at: time.Hour,
				during: func(id string) {
					if _, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: email.WorkflowID(id), UpdateName: email.RescheduleUpdate,
						Args: []any{email.RescheduleInput{ScheduledAt: slowAt}}, WaitForStage: client.WorkflowUpdateStageAccepted}); err != nil {
						t.Error(err)
					}
					update(email.RescheduleUpdate, email.RescheduleInput{ScheduledAt: time.Now().Add(4 * time.Second)})(id)
				},
				want: email.Result{Status: email.StatusSent, Attempts: 1}},
			{name: "canceled-run", to: []string{"jo@rcpt.example"}, schedule: short, at: time.Hour, canceled: true,
				during: func(id string) {
					if err := tc.CancelWorkflow(ctx, email.WorkflowID(id), ""); err != nil {
						t.Error(err)
					}
				}},
			// A run canceled through Temporal while its recipient waits
			// for the next attempt (canceled-run-erases-email).
			{name: "canceled-while-deferred", to: []string{"defer3@rcpt.example"}, schedule: []time.Duration{0, time.Hour}, canceled: true,
				during: func(id string) {
					waitForAttempt(t, st, id)
					if err := tc.CancelWorkflow(ctx, email.WorkflowID(id), ""); err != nil {
						t.Error(err)
					}
				}},
		}
	}
	// MAILYARD_RECORD_ONLY records one scenario: the rare one of a new
	// change, before and after it, leaving the others' files as they are.
	if only := os.Getenv("MAILYARD_RECORD_ONLY"); only != "" {
		scenarios = slices.DeleteFunc(scenarios, func(sc scenario) bool { return sc.name != only })
		if len(scenarios) == 0 {
			t.Fatalf("MAILYARD_RECORD_ONLY=%s names no scenario", only)
		}
	}
	for _, sc := range scenarios {
		id := uuid.Must(uuid.NewV7()).String()
		const subject = "Invoice 42 for you"
		if !sc.noEmail {
			newEmail(t, st, org.ID, domain, id, subject, sc.to)
		}
		if sc.failLocal {
			failLocal.Store(id, true)
		}
		// Started as the API starts it (api/emails.go).
		owner := searchattr.Owner{OrganizationID: org.ID, DomainID: domain}
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: email.WorkflowID(id), TaskQueue: email.TaskQueue,
			TypedSearchAttributes: owner.Attributes(), StaticSummary: owner.Summary("email " + id)},
			email.WorkflowName, email.Input{EmailID: id, Schedule: sc.schedule, Retention: time.Second, ScheduledAt: scheduledAt(sc.at), Version: email.CurrentVersion})
		if err != nil {
			t.Fatal(err)
		}
		if sc.during != nil {
			sc.during(id)
		}
		var res email.Result
		err = run.Get(ctx, &res)
		var canceled *temporal.CanceledError
		if sc.canceled && !errors.As(err, &canceled) {
			t.Fatalf("%s: %v, want canceled", sc.name, err)
		}
		if err != nil && !sc.canceled {
			t.Fatalf("%s: %v", sc.name, err)
		}
		if res != sc.want {
			t.Fatalf("%s: result %+v, want %+v", sc.name, res, sc.want)
		}
		raw := testenv.HistoryJSON(t, tc, run)
		// The history holds ids and counts, never an address or the
		// subject; payloads are base64 in the JSON.
		decoded := bytes.Clone(raw)
		for _, m := range payloadData.FindAllSubmatch(raw, -1) {
			b, err := base64.StdEncoding.DecodeString(string(m[1]))
			if err != nil {
				t.Fatal(err)
			}
			decoded = append(decoded, b...)
		}
		for _, secret := range []string{"rcpt.example", "billing", subject} {
			if bytes.Contains(decoded, []byte(secret)) {
				t.Fatalf("%s: the history shows %q", sc.name, secret)
			}
		}
		// v6: the current code (the version in the input, no marker;
		// the run ends when the email is settled); the v1 to v5 files
		// are kept from before each change, for the replay tests.
		path := filepath.Join("testdata", fmt.Sprintf("email-delivery-v6-%s.json", sc.name))
		if rare != "" {
			path = filepath.Join("testdata", fmt.Sprintf("email-delivery-rare-%s-%s.json", rare, sc.name))
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitForAttempt waits until the email's first recipient has been tried.
func waitForAttempt(t *testing.T, st *store.Store, id string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the first attempt of email "+id, func() bool {
		rs, err := st.EmailRecipients(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return len(rs) > 0 && rs[0].Attempts > 0
	})
}

// payloadData finds the payloads' data in a history's JSON.
var payloadData = regexp.MustCompile(`"data": "([A-Za-z0-9+/=]*)"`)

// newEmail stores an email as the API does before it starts the workflow.
func newEmail(t *testing.T, st *store.Store, orgID, domainID int64, id, subject string, to []string) {
	t.Helper()
	msg, problems := mailmsg.Validate(mailmsg.Request{From: "billing@shop.example", To: to, Subject: subject, Text: "Thank you."}, "shop.example")
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	content, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	e := &store.Email{ID: id, OrganizationID: orgID, DomainID: domainID, FromAddress: msg.From.Address, To: to, Subject: subject, Content: content}
	if err := st.CreateEmail(context.Background(), e, msg.Recipients()); err != nil {
		t.Fatal(err)
	}
}

// scheduledAt is the input's ScheduledAt for an email due after d (none
// for 0).
func scheduledAt(d time.Duration) *time.Time {
	if d == 0 {
		return nil
	}
	t := time.Now().Add(d).UTC()
	return &t
}
