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

// The first delivery step's writes are each one statement or transaction,
// and each is safe to run again: a retried step changes nothing the first
// run decided.
func TestDeliveryStepWritesAreIdempotent(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		id := uuid.Must(uuid.NewV7()).String()
		at := time.Now().Add(time.Hour).UTC()
		if err := st.CreateEmail(ctx, &store.Email{ID: id, OrganizationID: org, DomainID: domain, FromAddress: "a@x.example",
			Subject: "Hello", Content: []byte("{}"), ScheduledAt: &at}, []string{"ada@r.example", "bob@r.example"}); err != nil {
			t.Fatal(err)
		}

		// AcceptEmail: the first envelope sender wins, the scheduled email
		// is queued, and the count runs once.
		counted := 0
		count := func(context.Context, bun.IDB) error { counted++; return nil }
		for _, try := range []string{"bounces+first@mail.x.example", "bounces+second@mail.x.example"} {
			got, err := st.AcceptEmail(ctx, id, try, count)
			if err != nil || got != "bounces+first@mail.x.example" {
				t.Fatalf("AcceptEmail(%s) = %q, %v", try, got, err)
			}
		}
		if counted != 1 {
			t.Fatalf("count ran %d times, want once", counted)
		}
		e, _, err := st.EmailForDelivery(ctx, id)
		if err != nil || e.Status != store.EmailQueued || e.AcceptedAt == nil {
			t.Fatalf("after AcceptEmail: %+v, %v", e, err)
		}
		if _, err := st.AcceptEmail(ctx, uuid.Must(uuid.NewV7()).String(), "bounces+x@mail.x.example", count); err == nil {
			t.Fatal("AcceptEmail of an unknown email succeeded")
		}

		// SaveSignedMessage: the first message and its selector are kept.
		for _, try := range []struct{ msg, selector string }{{"first", "sel-1"}, {"second", "sel-2"}} {
			got, err := st.SaveSignedMessage(ctx, id, []byte(try.msg), try.selector)
			if err != nil || string(got) != "first" {
				t.Fatalf("SaveSignedMessage(%s) = %q, %v", try.msg, got, err)
			}
		}
		if e, _, _ := st.EmailForDelivery(ctx, id); e.DKIMSelector == nil || *e.DKIMSelector != "sel-1" {
			t.Fatalf("selector %v, want sel-1", e.DKIMSelector)
		}

		// FinishEmailIfDone: sent only once no recipient is pending.
		recipients, err := st.RecipientsForDelivery(ctx, id)
		if err != nil || len(recipients) != 2 || recipients[0].Address != "ada@r.example" {
			t.Fatalf("recipients %+v, %v", recipients, err)
		}
		for i, r := range recipients {
			if err := st.FinishEmailIfDone(ctx, id); err != nil {
				t.Fatal(err)
			}
			if e, _, _ := st.EmailForDelivery(ctx, id); e.Status != store.EmailQueued {
				t.Fatalf("with %d recipients pending: status %s", len(recipients)-i, e.Status)
			}
			if _, err := st.ChangeRecipient(ctx, id, store.RecipientChange{Position: r.Position, Status: store.RecipientDelivered}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.FinishEmailIfDone(ctx, id); err != nil {
			t.Fatal(err)
		}
		if e, _, _ := st.EmailForDelivery(ctx, id); e.Status != store.EmailSent || e.SentAt == nil {
			t.Fatalf("with none pending: status %s, sent at %v", e.Status, e.SentAt)
		}

		// Once erased, no message is stored again.
		if err := st.EraseEmailContent(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got, err := st.SaveSignedMessage(ctx, id, []byte("late"), "sel-3"); err != nil || got != nil {
			t.Fatalf("SaveSignedMessage after erasure = %q, %v", got, err)
		}
	})
}
