package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// DeleteUnstartedEmail removes an email no workflow has accepted, with its
// recipients, and says so; it leaves an accepted email alone and says it
// did not remove it (its workflow did start); an unknown id is not found.
func TestDeleteUnstartedEmailReportsWhetherItDeleted(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)

		unstarted := newEmail(t, st, org, domain, "ada@r.example", "bob@r.example")
		deleted, err := st.DeleteUnstartedEmail(ctx, unstarted)
		if err != nil || !deleted {
			t.Fatalf("DeleteUnstartedEmail of an unaccepted email = %v, %v; want true", deleted, err)
		}
		if n, err := st.DB.NewSelect().Model((*store.EmailRecipient)(nil)).Where("email_id = ?", unstarted).Count(ctx); err != nil || n != 0 {
			t.Fatalf("its recipients: %d rows (%v)", n, err)
		}
		if _, err := st.DeleteUnstartedEmail(ctx, unstarted); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("DeleteUnstartedEmail of a removed email: %v, want not found", err)
		}

		accepted := newEmail(t, st, org, domain, "ada@r.example")
		if _, err := st.AcceptEmail(ctx, accepted, store.Acceptance{EnvelopeSender: "bounces+x@mail.x.example", Recipients: 1}); err != nil {
			t.Fatal(err)
		}
		deleted, err = st.DeleteUnstartedEmail(ctx, accepted)
		if err != nil || deleted {
			t.Fatalf("DeleteUnstartedEmail of an accepted email = %v, %v; want false", deleted, err)
		}
		if e, recipients, err := st.EmailForDelivery(ctx, accepted); err != nil || e.AcceptedAt == nil {
			t.Fatalf("the accepted email after DeleteUnstartedEmail: %+v %v %v", e, recipients, err)
		}
	})
}

// The sweep's list leaves out canceled emails and emails whose workflow it
// has seen, and its query is served by emails_unaccepted_idx.
func TestUnacceptedEmailsLeaveOutCanceledAndSeen(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)

		create := func(scheduled bool) string {
			id := uuid.Must(uuid.NewV7()).String()
			e := &store.Email{ID: id, OrganizationID: org, DomainID: domain, FromAddress: "a@x.example", Subject: "Hello", Content: []byte("{}")}
			if scheduled {
				at := time.Now().Add(24 * time.Hour).UTC()
				e.ScheduledAt = &at
			}
			if err := st.CreateEmail(ctx, e, []string{"ada@r.example"}); err != nil {
				t.Fatal(err)
			}
			return id
		}
		queued, scheduled, canceled, seenQueued, seenScheduled := create(false), create(true), create(true), create(false), create(true)
		if err := st.CancelEmail(ctx, canceled); err != nil {
			t.Fatal(err)
		}
		if err := st.MarkEmailWorkflowsSeen(ctx, []string{seenQueued, seenScheduled}); err != nil {
			t.Fatal(err)
		}
		if err := st.MarkEmailWorkflowsSeen(ctx, nil); err != nil {
			t.Fatal(err)
		}

		// The query as the store sends it, for its plan below.
		var mu sync.Mutex
		var queries []string
		st.DB = st.DB.WithQueryHook(queryRecorder(func(q string) {
			mu.Lock()
			defer mu.Unlock()
			queries = append(queries, q)
		}))
		got, err := st.UnacceptedEmailsBefore(ctx, time.Now().Add(time.Minute), 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		if want := []string{queued, scheduled}; strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Fatalf("unaccepted emails %v, want %v (queued, scheduled; not canceled %s nor seen %s %s)", ids, want, canceled, seenQueued, seenScheduled)
		}
		mu.Lock()
		sweep := queries[len(queries)-1]
		mu.Unlock()

		var plan []string
		err = st.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			explain := "EXPLAIN QUERY PLAN "
			if st.IsPostgres() {
				// A handful of rows is read faster without any index.
				if _, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
					return err
				}
				explain = "EXPLAIN "
			}
			rows, err := tx.QueryContext(ctx, explain+sweep)
			if err != nil {
				return err
			}
			defer rows.Close()
			cols, err := rows.Columns()
			if err != nil {
				return err
			}
			for rows.Next() {
				vals := make([]any, len(cols))
				for i := range vals {
					vals[i] = new(any)
				}
				if err := rows.Scan(vals...); err != nil {
					return err
				}
				line := ""
				for _, v := range vals {
					if s, ok := (*v.(*any)).(string); ok {
						line += s + " "
					}
				}
				plan = append(plan, line)
			}
			return rows.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(plan, "\n"), "emails_unaccepted_idx") {
			t.Fatalf("the sweep's query %s is not served by emails_unaccepted_idx:\n%s", sweep, strings.Join(plan, "\n"))
		}
	})
}

// queryRecorder is a bun query hook that hands every query to record.
type queryRecorder func(string)

func (r queryRecorder) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}
func (r queryRecorder) AfterQuery(_ context.Context, e *bun.QueryEvent) { r(e.Query) }

// The sweep's removal waits on the database's clock, not on created_at
// (the clock of the API host that stored the email): the first call notes
// the email unstarted and removes nothing, a call before the age has passed
// since removes nothing, and a call after removes it. An accepted email is
// never removed.
func TestDeleteEmailUnstartedForWaitsFromTheFirstSighting(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		domain := newDomain(t, st, org, "x.example", store.DomainVerified)

		id := newEmail(t, st, org, domain, "ada@r.example")
		// Stored by a host whose clock is an hour behind.
		if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", time.Now().Add(-time.Hour)).Where("id = ?", id).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for call := range 2 {
			if deleted, err := st.DeleteEmailUnstartedFor(ctx, id, 2*time.Minute); err != nil || deleted {
				t.Fatalf("call %d: deleted %v, %v; want the email kept", call+1, deleted, err)
			}
		}
		if _, _, err := st.EmailForDelivery(ctx, id); err != nil {
			t.Fatalf("the email after two early calls: %v", err)
		}
		if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("unstarted_since = ?", time.Now().Add(-3*time.Minute)).Where("id = ?", id).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if deleted, err := st.DeleteEmailUnstartedFor(ctx, id, 2*time.Minute); err != nil || !deleted {
			t.Fatalf("once the age has passed: deleted %v, %v; want removed", deleted, err)
		}

		accepted := newEmail(t, st, org, domain, "ada@r.example")
		if _, err := st.AcceptEmail(ctx, accepted, store.Acceptance{EnvelopeSender: "bounces+x@mail.x.example", Recipients: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("unstarted_since = ?", time.Now().Add(-time.Hour)).Where("id = ?", accepted).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if deleted, err := st.DeleteEmailUnstartedFor(ctx, accepted, 2*time.Minute); err != nil || deleted {
			t.Fatalf("an accepted email: deleted %v, %v; want kept", deleted, err)
		}
		if _, err := st.DeleteEmailUnstartedFor(ctx, accepted, 0); err == nil {
			t.Fatal("an age of 0 was taken")
		}
	})
}
