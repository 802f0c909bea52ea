package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

		// AcceptEmail: the first envelope sender and signed message (with
		// its selector) win, the scheduled email is queued, and its
		// recipients are counted as accepted once.
		for _, try := range []store.Acceptance{
			{EnvelopeSender: "bounces+first@mail.x.example", Recipients: 2, SignedMessage: []byte("first"), Selector: "sel-1"},
			{EnvelopeSender: "bounces+second@mail.x.example", Recipients: 2, SignedMessage: []byte("second"), Selector: "sel-2"},
			{EnvelopeSender: "bounces+third@mail.x.example", Recipients: 2},
		} {
			got, err := st.AcceptEmail(ctx, id, try)
			if err != nil || got.EnvelopeSender != "bounces+first@mail.x.example" || string(got.SignedMessage) != "first" {
				t.Fatalf("AcceptEmail(%s) = %+v, %v", try.EnvelopeSender, got, err)
			}
		}
		if n := acceptedSinceYesterday(t, st, org); n != 2 {
			t.Fatalf("accepted %d, want 2", n)
		}
		e, _, err := st.EmailForDelivery(ctx, id)
		if err != nil || e.Status != store.EmailQueued || e.AcceptedAt == nil || string(e.SignedMessage) != "first" ||
			e.DKIMSelector == nil || *e.DKIMSelector != "sel-1" {
			t.Fatalf("after AcceptEmail: %+v, %v", e, err)
		}
		if _, err := st.AcceptEmail(ctx, uuid.Must(uuid.NewV7()).String(), store.Acceptance{EnvelopeSender: "bounces+x@mail.x.example", Recipients: 1}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("AcceptEmail of an unknown email: %v, want not found", err)
		}

		// Runs of the step that start while another run's write is not
		// yet committed wait for it, and then count nothing and keep its
		// sender.
		other := newEmail(t, st, org, domain, "cy@r.example")
		first, err := st.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := first.NewUpdate().Model((*store.Email)(nil)).Set("accepted_at = ?", time.Now()).
			Set("envelope_sender = ?", "bounces+first@mail.x.example").Where("id = ?", other).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		senders := make([]string, 4)
		var wg sync.WaitGroup
		for i := range senders {
			wg.Go(func() {
				got, err := st.AcceptEmail(ctx, other, store.Acceptance{EnvelopeSender: fmt.Sprintf("bounces+%d@mail.x.example", i), Recipients: 3})
				if err != nil {
					t.Errorf("AcceptEmail run %d: %v", i, err)
				}
				senders[i] = got.EnvelopeSender
			})
		}
		time.Sleep(300 * time.Millisecond) // the runs are waiting
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for _, got := range senders {
			if got != "bounces+first@mail.x.example" {
				t.Fatalf("runs waiting for the first got senders %q", senders)
			}
		}
		if n := acceptedSinceYesterday(t, st, org); n != 2 {
			t.Fatalf("accepted %d after the waiting runs, want 2", n)
		}

		// SettleEmail: sent only once no recipient is pending.
		recipients, err := st.RecipientsForDelivery(ctx, id)
		if err != nil || len(recipients) != 2 || recipients[0].Address != "ada@r.example" {
			t.Fatalf("recipients %+v, %v", recipients, err)
		}
		for i, r := range recipients {
			if _, err := st.SettleEmail(ctx, id); err != nil {
				t.Fatal(err)
			}
			if e, _, _ := st.EmailForDelivery(ctx, id); e.Status != store.EmailQueued {
				t.Fatalf("with %d recipients pending: status %s", len(recipients)-i, e.Status)
			}
			if _, err := st.ChangeRecipient(ctx, id, store.RecipientChange{Position: r.Position, Status: store.RecipientDelivered}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.SettleEmail(ctx, id); err != nil {
			t.Fatal(err)
		}
		if e, _, _ := st.EmailForDelivery(ctx, id); e.Status != store.EmailSent || e.SentAt == nil {
			t.Fatalf("with none pending: status %s, sent at %v", e.Status, e.SentAt)
		}

		// ChangeRecipient: of runs at the same time, one makes the change
		// and runs its effects, with the status the recipient had.
		code := 451
		if _, err := st.ChangeRecipient(ctx, other, store.RecipientChange{Position: 0, Status: store.RecipientDeferred, Attempted: true, SMTPCode: &code, Response: "451 later"}, nil); err != nil {
			t.Fatal(err)
		}
		var effects atomic.Int32
		var seen atomic.Value
		for range 6 {
			wg.Go(func() {
				code := 250
				change := store.RecipientChange{Position: 0, Status: store.RecipientDelivered, Attempted: true, SMTPCode: &code, Response: "250 ok"}
				_, err := st.ChangeRecipient(ctx, other, change, func(_ context.Context, _ bun.IDB, before string) error {
					effects.Add(1)
					seen.Store(before)
					return nil
				})
				if err != nil {
					t.Errorf("ChangeRecipient: %v", err)
				}
			})
		}
		wg.Wait()
		if effects.Load() != 1 || seen.Load() != store.RecipientDeferred {
			t.Fatalf("effects ran %d times, with status before %v; want once, with deferred", effects.Load(), seen.Load())
		}
		rs, err := st.RecipientsForDelivery(ctx, other)
		if err != nil || rs[0].Status != store.RecipientDelivered || rs[0].Attempts != 2 || rs[0].SMTPCode == nil || *rs[0].SMTPCode != 250 {
			t.Fatalf("recipient after the change: %+v, %v", rs, err)
		}

		// Once erased, no message is stored again.
		if err := st.EraseEmailContent(ctx, id); err != nil {
			t.Fatal(err)
		}
		late := store.Acceptance{EnvelopeSender: "bounces+late@mail.x.example", Recipients: 2, SignedMessage: []byte("late"), Selector: "sel-3"}
		if got, err := st.AcceptEmail(ctx, id, late); err != nil || got.SignedMessage != nil {
			t.Fatalf("AcceptEmail after erasure = %+v, %v", got, err)
		}
		if e, _, _ := st.EmailForDelivery(ctx, id); e.SignedMessage != nil || e.DKIMSelector == nil || *e.DKIMSelector != "sel-1" {
			t.Fatalf("after erasure: message %q, selector %v", e.SignedMessage, e.DKIMSelector)
		}
	})
}

// A scheduled email's recipients count as accepted on the day it is
// accepted (its time came), not the day it was created: an email scheduled
// days ahead changed a day long past.
func TestAcceptedCountsOnTheDayOfAcceptance(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		id := newEmail(t, st, org, domain, "ada@r.example", "bob@r.example")
		created := time.Now().UTC().AddDate(0, 0, -3)
		if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", created).Where("id = ?", id).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AcceptEmail(ctx, id, store.Acceptance{EnvelopeSender: "bounces+a@mail.x.example", Recipients: 2}); err != nil {
			t.Fatal(err)
		}
		days, err := st.Stats(ctx, org, nil, created, time.Now().UTC())
		if err != nil || len(days) != 4 {
			t.Fatalf("stats %+v, %v", days, err)
		}
		if days[0].Accepted != 0 || days[3].Accepted != 2 {
			t.Fatalf("accepted %d on the day of creation and %d today, want 0 and 2", days[0].Accepted, days[3].Accepted)
		}
	})
}

// acceptedSinceYesterday is the organization's accepted count of today and
// yesterday (UTC), so that a test running over midnight counts the same.
func acceptedSinceYesterday(t *testing.T, st *store.Store, org int64) int64 {
	t.Helper()
	today := time.Now().UTC()
	days, err := st.Stats(context.Background(), org, nil, today.AddDate(0, 0, -1), today)
	if err != nil || len(days) != 2 {
		t.Fatalf("stats: %+v, %v", days, err)
	}
	return days[0].Accepted + days[1].Accepted
}

// The first delivery step reads the email, its domain and the domain's
// active DKIM key in one query; the key is the one DKIMKeyInState finds
// (the active one of the lowest generation), and none while the domain has
// no active key.
func TestEmailToPrepareComesWithTheActiveKey(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)
		other := newDomain(t, st, org, "y.example", store.DomainVerified)
		id := newEmail(t, st, org, domain, "ada@r.example")
		addKey := func(domainID int64, selector string, generation int, state string) int64 {
			t.Helper()
			k, err := st.InsertDKIMKeyIfAbsent(ctx, &store.DKIMKey{Selector: selector, DomainID: domainID, Position: 1,
				Generation: generation, State: state, Bits: 2048, PrivateKeyEnc: []byte("sealed-" + selector), PublicKey: "pub"})
			if err != nil {
				t.Fatal(err)
			}
			return k.ID
		}
		check := func(wantKey int64) {
			t.Helper()
			e, d, key, err := st.EmailToPrepare(ctx, id)
			if err != nil || e.ID != id || d == nil || d.ID != domain || d.Domain != "x.example" {
				t.Fatalf("EmailToPrepare: %+v %+v %v", e, d, err)
			}
			switch {
			case wantKey == 0 && key != nil:
				t.Fatalf("key %+v, want none", key)
			case wantKey != 0 && (key == nil || key.ID != wantKey || key.State != store.DKIMActive || len(key.PrivateKeyEnc) == 0):
				t.Fatalf("key %+v, want %d", key, wantKey)
			}
			if wantKey != 0 {
				byState, err := st.DKIMKeyInState(ctx, domain, store.DKIMActive)
				if err != nil || byState.ID != key.ID {
					t.Fatalf("DKIMKeyInState found %+v (%v), EmailToPrepare %d", byState, err, key.ID)
				}
			}
		}

		addKey(domain, "pub1", 1, store.DKIMPublishing)
		addKey(other, "other1", 1, store.DKIMActive)
		check(0)
		second := addKey(domain, "sel1", 2, store.DKIMActive)
		addKey(domain, "sel2", 1, store.DKIMStandby)
		check(second)
		first := addKey(domain, "sel3", 1, store.DKIMActive)
		check(first)

		if _, _, _, err := st.EmailToPrepare(ctx, uuid.Must(uuid.NewV7()).String()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown email: %v, want not found", err)
		}
	})
}
