package inbound_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/smtp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/inbound"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	inboundwf "github.com/mailyard/mailyard/workflows/inbound"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func serve(t *testing.T, b *inbound.Backend) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- b.Serve(ctx, inbound.Listener{Addr: "127.0.0.1:0", SweepEvery: time.Hour}, func(a string) { ready <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

// With Temporal unreachable, a message is still committed and answered
// 250; the sweep of a process that reaches Temporal starts its workflow.
func TestTemporalDownNeverBlocksThe250(t *testing.T) {
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	tags, _ := bouncetag.New(bytes.Repeat([]byte{1}, 32))
	dead, err := client.NewLazyClient(client.Options{HostPort: testenv.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	logger := slog.New(slog.DiscardHandler)
	down := &inbound.Backend{Store: st, Temporal: dead, Tags: tags, BounceHost: "bounces.example", Retention: time.Hour, Logger: logger}
	addr := serve(t, down)

	msg := "From: fbl@isp.example\r\nTo: fbl@bounces.example\r\nSubject: report\r\n\r\nbody\r\n"
	if err := smtp.SendMail(addr, nil, "fbl@isp.example", []string{"fbl@bounces.example"}, []byte(msg)); err != nil {
		t.Fatalf("with Temporal down: %v", err)
	}
	rows, err := st.UnhandledInboundBefore(context.Background(), time.Now().Add(time.Minute), 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("stored %v, %v", rows, err)
	}

	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	up := &inbound.Backend{Store: st, Temporal: tc, Tags: tags, BounceHost: "bounces.example", Retention: time.Hour, Logger: logger}
	// Not yet old enough: the sweep leaves messages of the last minute to
	// the start that follows their 250.
	if err := up.SweepOnce(context.Background(), time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.DescribeWorkflowExecution(context.Background(), inboundwf.WorkflowID(rows[0].ID), ""); err == nil {
		t.Fatal("the sweep started a message of the last minute")
	}
	for range 2 { // twice: a second start of the same message is harmless
		if err := up.SweepOnce(context.Background(), time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tc.DescribeWorkflowExecution(context.Background(), inboundwf.WorkflowID(rows[0].ID), ""); err != nil {
		t.Fatalf("the sweep did not start the message's workflow: %v", err)
	}
	var m store.InboundMessage
	if err := st.DB.NewSelect().Model(&m).Where("id = ?", rows[0].ID).Scan(context.Background()); err != nil || string(m.Raw) != msg {
		t.Fatalf("stored bytes %q, %v", m.Raw, err)
	}
}

// RCPT TO takes an email's stored envelope sender only: the untagged form
// of an email sent before tags, not the tagged form of that email, nor a
// well-tagged address of an email that does not exist.
func TestRecipientsAreTheStoredEnvelopeSenders(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	tags, _ := bouncetag.New(bytes.Repeat([]byte{2}, 32))
	secret, row, err := keyauth.New("boot", "boot", store.Permissions{"admin"})
	if err != nil || secret == "" {
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
	old := uuid.Must(uuid.NewV7()).String()
	if err := st.CreateEmail(ctx, &store.Email{ID: old, OrganizationID: org.ID, DomainID: d.ID, FromAddress: "a@shop.example", Subject: "s"}, []string{"ada@rcpt.example"}); err != nil {
		t.Fatal(err)
	}
	// As the migration left an email sent before tags.
	if _, err := st.AcceptEmail(ctx, old, store.Acceptance{EnvelopeSender: bouncetag.Untagged(old, "mail.shop.example"), Recipients: 1}); err != nil {
		t.Fatal(err)
	}
	dead, _ := client.NewLazyClient(client.Options{HostPort: testenv.FreeAddr(t)})
	defer dead.Close()
	addr := serve(t, &inbound.Backend{Store: st, Temporal: dead, Tags: tags, BounceHost: "bounces.example", Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})

	rcpt := func(to string) error {
		c, err := smtp.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Mail(""); err != nil {
			t.Fatal(err)
		}
		return c.Rcpt(to)
	}
	if err := rcpt(strings.ToUpper(bouncetag.Untagged(old, "mail.shop.example"))); err != nil {
		t.Fatalf("the untagged sender of an old email: %v", err)
	}
	for _, to := range []string{
		tags.Sender(old, "mail.shop.example"),
		tags.Sender(uuid.Must(uuid.NewV7()).String(), "mail.shop.example"),
		bouncetag.Untagged(old, "other.example"),
	} {
		if err := rcpt(to); err == nil || !strings.Contains(err.Error(), "550") {
			t.Fatalf("RCPT TO %s: %v, want 550 5.1.1", to, err)
		}
	}
}

// A message whose run ended without handling it (an operator terminated
// it) is not asked about again: a start of its id changes nothing, and such
// messages, the oldest, would fill every pass's batch ahead of newer ones
// whose workflow never started.
func TestSweepLeavesAMessageWhoseRunEnded(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	tags, _ := bouncetag.New(bytes.Repeat([]byte{3}, 32))
	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	b := &inbound.Backend{Store: st, Temporal: tc, Tags: tags, BounceHost: "bounces.example", Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	store1 := func() string {
		m := &store.InboundMessage{ID: uuid.Must(uuid.NewV7()).String(), Recipients: store.AddressList{"fbl@bounces.example"}, Raw: []byte("Subject: x\r\n\r\nbody")}
		if err := st.CreateInboundMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	sweep := func() {
		t.Helper()
		if err := b.SweepOnce(ctx, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}

	ended := store1()
	sweep()
	// No worker handles this test's message; whatever the run did, it ends
	// here, and the message stays unhandled.
	_ = tc.TerminateWorkflow(ctx, inboundwf.WorkflowID(ended), "", "an operator stopped it")
	newer := store1()
	sweep()
	if _, err := tc.DescribeWorkflowExecution(ctx, inboundwf.WorkflowID(newer), ""); err != nil {
		t.Fatalf("the sweep did not start the newer message's workflow: %v", err)
	}
	rows, err := st.UnhandledInboundBefore(ctx, time.Now().Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Errorf("message %s (the ended run's: %v) is still listed for the sweep", r.ID, r.ID == ended)
	}
	var m store.InboundMessage
	if err := st.DB.NewSelect().Model(&m).Where("id = ?", ended).Scan(ctx); err != nil || m.HandledAt != nil || m.WorkflowSeenAt == nil {
		t.Fatalf("the ended run's message: handled %v, seen %v, %v", m.HandledAt, m.WorkflowSeenAt, err)
	}
}
