package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// The retention sweep erases the emails sent before the cutoff, oldest
// first and at most limit at a time, with their recipients' signed
// messages; an email sent since, or not sent yet, keeps its content, and
// an erased one is not erased again.
func TestEraseEmailsSentBefore(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		now := time.Now()
		sent := func(at time.Time) string {
			t.Helper()
			id := newEmail(t, st, org, domain, "ada@r.example")
			if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("status = ?", store.EmailSent).
				Set("sent_at = ?", at.UTC()).Set("signed_message = ?", []byte("signed")).Where("id = ?", id).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := st.DB.NewUpdate().Model((*store.EmailRecipient)(nil)).Set("signed_message = ?", []byte("tracked")).
				Where("email_id = ?", id).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			return id
		}
		older, old, recent := sent(now.Add(-3*time.Hour)), sent(now.Add(-2*time.Hour)), sent(now)
		queued := newEmail(t, st, org, domain, "bob@r.example")
		erased := func(id string) bool {
			t.Helper()
			e := new(store.Email)
			if err := st.DB.NewSelect().Model(e).Where("id = ?", id).Scan(ctx); err != nil {
				t.Fatal(err)
			}
			var signed []byte
			if err := st.DB.NewSelect().Model((*store.EmailRecipient)(nil)).Column("signed_message").
				Where("email_id = ?", id).Scan(ctx, &signed); err != nil {
				t.Fatal(err)
			}
			gone := e.Content == nil && e.SignedMessage == nil && signed == nil
			if gone != (e.ErasedAt != nil) {
				t.Fatalf("email %s half erased: content %q, signed %q, recipient's %q, erased at %v", id, e.Content, e.SignedMessage, signed, e.ErasedAt)
			}
			return gone
		}
		cutoff := now.Add(-time.Hour)
		for i, want := range []int{1, 1, 0} {
			n, err := st.EraseEmailsSentBefore(ctx, cutoff, 1)
			if err != nil || n != want {
				t.Fatalf("pass %d erased %d (%v), want %d", i, n, err, want)
			}
			if i == 0 && (!erased(older) || erased(old)) {
				t.Fatal("the first pass did not erase the oldest email alone")
			}
		}
		if !erased(old) || erased(recent) || erased(queued) {
			t.Fatal("erased the wrong emails")
		}
	})
}

// On PostgreSQL, sweeps of several workers take different emails: one
// locked by another sweep's transaction is skipped, not waited for and
// written again.
func TestEraseEmailsSkipsThoseAnotherSweepHolds(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	org := newOrg(t, st, "acme")
	domain := newDomain(t, st, org, "x.example", store.DomainVerified)
	sent := func(at time.Time) string {
		id := newEmail(t, st, org, domain, "ada@r.example")
		if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("status = ?", store.EmailSent).
			Set("sent_at = ?", at.UTC()).Where("id = ?", id).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		return id
	}
	held, free := sent(time.Now().Add(-3*time.Hour)), sent(time.Now().Add(-2*time.Hour))
	other, err := st.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	if _, err := other.ExecContext(ctx, "SELECT id FROM emails WHERE id = ? FOR UPDATE", held); err != nil {
		t.Fatal(err)
	}
	sweepCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := st.EraseEmailsSentBefore(sweepCtx, time.Now().Add(-time.Hour), 10)
	if err != nil || n != 1 {
		t.Fatalf("erased %d (%v) beside a held email, want the other one", n, err)
	}
	var erased []string
	if err := st.DB.NewSelect().Model((*store.Email)(nil)).Column("id").Where("erased_at IS NOT NULL").Scan(ctx, &erased); err != nil {
		t.Fatal(err)
	}
	if len(erased) != 1 || erased[0] != free {
		t.Fatalf("erased %v, want only %s", erased, free)
	}
}

// The same for inbound messages: those handled before the cutoff lose
// their bytes and addresses, and so do those received before it and never
// handled; one handled since, or received since and not handled yet, keeps
// them.
func TestEraseInboundHandledBefore(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		now := time.Now()
		message := func(receivedAt time.Time, handledAt *time.Time) string {
			t.Helper()
			m := &store.InboundMessage{ID: uuid.Must(uuid.NewV7()).String(), MailFrom: "mailer-daemon@r.example",
				Recipients: store.AddressList{"bounces+x@mail.x.example"}, Raw: []byte("Subject: x\r\n\r\nbody")}
			if err := st.CreateInboundMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
			if _, err := st.DB.NewUpdate().Model((*store.InboundMessage)(nil)).Set("received_at = ?", receivedAt.UTC()).
				Where("id = ?", m.ID).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if handledAt != nil {
				if _, err := st.MarkInboundHandled(ctx, m.ID, store.InboundDSN, "", 0, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := st.DB.NewUpdate().Model((*store.InboundMessage)(nil)).Set("handled_at = ?", handledAt.UTC()).
					Where("id = ?", m.ID).Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
			return m.ID
		}
		hoursAgo, dayAgo := now.Add(-2*time.Hour), now.Add(-24*time.Hour)
		// recent was received a day ago and handled now; oldUnhandled and
		// olderUnhandled were never handled.
		old, recent := message(dayAgo, &hoursAgo), message(dayAgo, &now)
		olderUnhandled, oldUnhandled, unhandled := message(dayAgo, nil), message(hoursAgo, nil), message(now, nil)
		cutoff := now.Add(-time.Hour)
		for i, want := range []int{1, 0} {
			n, err := st.EraseInboundHandledBefore(ctx, cutoff, 10)
			if err != nil || n != want {
				t.Fatalf("pass %d erased %d (%v), want %d", i, n, err, want)
			}
		}
		// Oldest first, limit at a time.
		for i, want := range []int{1, 1, 0} {
			n, err := st.EraseInboundUnhandledBefore(ctx, cutoff, 1)
			if err != nil || n != want {
				t.Fatalf("unhandled pass %d erased %d (%v), want %d", i, n, err, want)
			}
			if i == 0 {
				if m, err := st.InboundMessageByID(ctx, oldUnhandled); err != nil || m.ErasedAt != nil {
					t.Fatalf("the first pass erased a newer message before the oldest: %+v, %v", m, err)
				}
			}
		}
		for id, want := range map[string]bool{old: true, recent: false, olderUnhandled: true, oldUnhandled: true, unhandled: false} {
			m, err := st.InboundMessageByID(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if gone := m.Raw == nil && len(m.Recipients) == 0 && m.MailFrom == "" && m.ErasedAt != nil; gone != want {
				t.Fatalf("message %s: erased %v, want %v (%+v)", id, gone, want, m)
			}
		}
	})
}

// The retention sweep's abandoned emails: those created before the cutoff,
// never sent and not erased, oldest first and at most limit, each saying
// whether a run accepted it.
func TestUnsentEmailsCreatedBefore(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		now := time.Now()
		created := func(at time.Time) string {
			t.Helper()
			id := newEmail(t, st, org, domain, "ada@r.example")
			if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", at.UTC()).Where("id = ?", id).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			return id
		}
		older, old, erased, sent := created(now.Add(-3*time.Hour)), created(now.Add(-2*time.Hour)), created(now.Add(-2*time.Hour)), created(now.Add(-2*time.Hour))
		created(now) // recent: not listed
		if _, err := st.AcceptEmail(ctx, old, store.Acceptance{EnvelopeSender: "bounces+x@mail.x.example", Recipients: 1}); err != nil {
			t.Fatal(err)
		}
		if err := st.EraseEmailContent(ctx, erased); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("status = ?", store.EmailSent).Set("sent_at = ?", now.UTC()).
			Where("id = ?", sent).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		cutoff := now.Add(-time.Hour)
		got, err := st.UnsentEmailsCreatedBefore(ctx, cutoff, 10)
		want := []store.UnsentEmail{{ID: older}, {ID: old, Accepted: true}}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("listed %+v (%v), want %+v", got, err, want)
		}
		if got, err := st.UnsentEmailsCreatedBefore(ctx, cutoff, 1); err != nil || len(got) != 1 || got[0].ID != older {
			t.Fatalf("limit 1 listed %+v (%v), want the oldest", got, err)
		}
	})
}
