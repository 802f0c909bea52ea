package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func newEmail(t *testing.T, st *store.Store, org, domain int64, recipients ...string) string {
	t.Helper()
	id := uuid.Must(uuid.NewV7()).String()
	e := &store.Email{ID: id, OrganizationID: org, DomainID: domain, FromAddress: "a@x.example", Subject: "Hello", Content: []byte("{}")}
	if err := st.CreateEmail(context.Background(), e, recipients); err != nil {
		t.Fatal(err)
	}
	return id
}

// An inbound message is stored whole, handled once (the first handling
// wins and says so), listed by the sweep until handled, and erased.
func TestInboundMessageLifecycle(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		m := &store.InboundMessage{ID: uuid.Must(uuid.NewV7()).String(), MailFrom: "", Recipients: store.AddressList{"fbl@bounces.example"}, Raw: []byte("Subject: x\r\n\r\nbody")}
		if err := st.CreateInboundMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		got, err := st.InboundMessageByID(ctx, m.ID)
		if err != nil || string(got.Raw) != string(m.Raw) || got.Size != len(m.Raw) || got.Recipients[0] != "fbl@bounces.example" || got.HandledAt != nil {
			t.Fatalf("read back %+v, %v", got, err)
		}
		later := time.Now().Add(time.Minute)
		if rows, err := st.UnhandledInboundBefore(ctx, later, 10); err != nil || len(rows) != 1 || rows[0].ID != m.ID {
			t.Fatalf("unhandled %v %v", rows, err)
		}
		// A complaint to fbl@: the email it named is recorded with the
		// handling, for a retried step to settle.
		emailID := uuid.Must(uuid.NewV7()).String()
		if first, err := st.MarkInboundHandled(ctx, m.ID, store.InboundARF, emailID, 3, 7); err != nil || !first {
			t.Fatalf("first handling: %v %v", first, err)
		}
		if first, err := st.MarkInboundHandled(ctx, m.ID, store.InboundUnrecognized, "", 0, 0); err != nil || first {
			t.Fatalf("second handling: %v %v", first, err)
		}
		got, _ = st.InboundMessageByID(ctx, m.ID)
		if *got.Kind != store.InboundARF || got.EmailID == nil || *got.EmailID != emailID || *got.OrganizationID != 3 || *got.DomainID != 7 {
			t.Fatalf("handled as %v (email %v, org %v)", *got.Kind, got.EmailID, got.OrganizationID)
		}
		if rows, _ := st.UnhandledInboundBefore(ctx, later, 10); len(rows) != 0 {
			t.Fatalf("a handled message is still listed: %v", rows)
		}
		if err := st.EraseInboundMessage(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
		got, _ = st.InboundMessageByID(ctx, m.ID)
		if got.Raw != nil || len(got.Recipients) != 0 || got.ErasedAt == nil || got.Size != len(m.Raw) {
			t.Fatalf("erased message %+v", got)
		}
	})
}

// An empty message is stored empty, not as NULL (an erased message's
// bytes), and leaves the sweep's list once handled.
func TestEmptyInboundMessage(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		m := &store.InboundMessage{ID: uuid.Must(uuid.NewV7()).String(), Recipients: store.AddressList{"fbl@bounces.example"}, Raw: []byte{}}
		if err := st.CreateInboundMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		got, err := st.InboundMessageByID(ctx, m.ID)
		if err != nil || got.Raw == nil || got.Size != 0 || got.ErasedAt != nil {
			t.Fatalf("read back %+v, %v", got, err)
		}
		if first, err := st.MarkInboundHandled(ctx, m.ID, store.InboundUnrecognized, "", 0, 0); err != nil || !first {
			t.Fatalf("handling: %v %v", first, err)
		}
		if rows, err := st.UnhandledInboundBefore(ctx, time.Now().Add(time.Minute), 10); err != nil || len(rows) != 0 {
			t.Fatalf("unhandled %v %v", rows, err)
		}
	})
}

// A "delayed" report changes a recipient's last response only while a
// later report could still change the recipient: one that arrives after
// the bounce keeps the bounce's response.
func TestNoteRecipientResponseLeavesFinalRecipients(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		id := newEmail(t, st, org, domain, "ada@r.example", "bob@r.example", "cy@r.example", "dee@r.example")
		statuses := []string{store.RecipientDelivered, store.RecipientBounced, store.RecipientSuppressed, store.RecipientDeferred}
		for pos, status := range statuses {
			if _, err := st.ChangeRecipient(ctx, id, store.RecipientChange{Position: pos, Status: status, Response: "before"}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for pos := range statuses {
			if err := st.NoteRecipientResponse(ctx, id, pos, "delayed"); err != nil {
				t.Fatal(err)
			}
		}
		rs, err := st.EmailRecipients(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"delayed", "before", "before", "delayed"}
		for i, r := range rs {
			if r.LastResponse == nil || *r.LastResponse != want[i] || r.Status != statuses[i] {
				t.Fatalf("recipient %d (%s): response %q, want %q", i, r.Status, derefOr(r.LastResponse, "<nil>"), want[i])
			}
		}
	})
}

// A bounce learned later moves a delivered recipient to bounced once; a
// bounced or suppressed one is left alone, and its effects do not run.
func TestReviseRecipientOnce(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		id := newEmail(t, st, org, domain, "ada@r.example", "bob@r.example")
		for pos, status := range []string{store.RecipientDelivered, store.RecipientSuppressed} {
			if _, err := st.ChangeRecipient(ctx, id, store.RecipientChange{Position: pos, Status: status}, nil); err != nil {
				t.Fatal(err)
			}
		}
		effects := 0
		count := func(context.Context, bun.IDB, string) error { effects++; return nil }
		code := 550
		bounce := func(pos int) bool {
			changed, err := st.ReviseRecipient(ctx, id, store.RecipientChange{Position: pos, Status: store.RecipientBounced, SMTPCode: &code, Response: "550 gone"}, count)
			if err != nil {
				t.Fatal(err)
			}
			return changed
		}
		if !bounce(0) || bounce(0) || bounce(1) || effects != 1 {
			t.Fatalf("revisions ran effects %d times, want 1", effects)
		}
		rs, err := st.EmailRecipients(ctx, id)
		if err != nil || rs[0].Status != store.RecipientBounced || *rs[0].SMTPCode != 550 || *rs[0].LastResponse != "550 gone" || rs[1].Status != store.RecipientSuppressed {
			t.Fatalf("recipients %+v %v", rs, err)
		}
	})
}

// The envelope sender is stored once; a retried step gets the first one.
func TestEmailEnvelopeFirstSenderWins(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		id := newEmail(t, st, org, domain, "ada@r.example")
		for _, try := range []string{"bounces+" + id + ".aaaaaaaa@mail.x.example", "bounces+" + id + ".bbbbbbbb@mail.x.example"} {
			got, err := st.AcceptEmail(ctx, id, store.Acceptance{EnvelopeSender: try, Recipients: 1})
			if err != nil || got.EnvelopeSender != "bounces+"+id+".aaaaaaaa@mail.x.example" {
				t.Fatalf("stored %q, %v", got, err)
			}
		}
		e, name, err := st.EmailEnvelope(ctx, id)
		if err != nil || name != "x.example" || *e.EnvelopeSender != "bounces+"+id+".aaaaaaaa@mail.x.example" {
			t.Fatalf("envelope %+v %q %v", e, name, err)
		}
		// The events of an email are its organization's to read only.
		if _, _, err := st.EmailEvents(ctx, store.EmailScope{OrganizationID: org + 1}, id, store.Page{}); err == nil {
			t.Fatal("another organization read the email's events")
		}
		if events, _, err := st.EmailEvents(ctx, store.EmailScope{OrganizationID: org}, id, store.Page{}); err != nil || len(events) != 0 {
			t.Fatalf("events %v %v", events, err)
		}
	})
}

func derefOr(s *string, none string) string {
	if s == nil {
		return none
	}
	return *s
}
