package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/retention"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/workflows/email"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The sweep of abandoned emails erases, on a real Temporal server, the
// content of an email never sent and older than any email on its way whose
// run has ended (terminated), or whose run Temporal no longer knows once a
// run accepted it. It leaves an email whose run is open, one no run
// accepted that Temporal does not know (the API's sweep may yet start it),
// a recent one, and a sent one.
func TestEraseAbandoned(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	box, _ := secrets.New(make([]byte, 32))
	org, err := st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "b", Username: "b", Prefix: "p", Digest: []byte("d"), Permissions: store.Permissions{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	domain := testenv.SigningDomain(t, st, box, org.ID, "shop.example")

	type run int
	const (
		noRun run = iota
		openRun
		terminatedRun
	)
	old := time.Now().Add(-retention.AbandonedAfter - time.Hour)
	emailWith := func(created time.Time, accepted bool, r run) string {
		t.Helper()
		e := &store.Email{ID: uuid.Must(uuid.NewV7()).String(), OrganizationID: org.ID, DomainID: domain,
			FromAddress: "billing@shop.example", Subject: "Invoice", Content: []byte(`{"text":"Thank you."}`)}
		if err := st.CreateEmail(ctx, e, []string{"ada@rcpt.example"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("created_at = ?", created.UTC()).Where("id = ?", e.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if accepted {
			if _, err := st.AcceptEmail(ctx, e.ID, store.Acceptance{EnvelopeSender: "bounces+x@mail.shop.example", Recipients: 1, SignedMessage: []byte("signed")}); err != nil {
				t.Fatal(err)
			}
		}
		if r != noRun {
			// No worker polls this queue: the run stays open until it is
			// terminated.
			if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: email.WorkflowID(e.ID), TaskQueue: "retention-test-no-worker"}, email.WorkflowName); err != nil {
				t.Fatal(err)
			}
		}
		if r == terminatedRun {
			if err := tc.TerminateWorkflow(ctx, email.WorkflowID(e.ID), "", "an operator"); err != nil {
				t.Fatal(err)
			}
		}
		return e.ID
	}
	terminated, terminatedUnaccepted, forgotten := emailWith(old, true, terminatedRun), emailWith(old, false, terminatedRun), emailWith(old, true, noRun)
	open, neverStarted, recent := emailWith(old, true, openRun), emailWith(old, false, noRun), emailWith(time.Now(), true, terminatedRun)
	sent := emailWith(old, true, terminatedRun)
	if _, err := st.DB.NewUpdate().Model((*store.Email)(nil)).Set("status = ?", store.EmailSent).Set("sent_at = ?", time.Now().UTC()).
		Where("id = ?", sent).Exec(ctx); err != nil {
		t.Fatal(err)
	}

	cutoff := time.Now().Add(-retention.AbandonedAfter)
	for i, want := range []int{3, 0} {
		n, err := retention.EraseAbandoned(ctx, st, tc, cutoff)
		if err != nil || n != want {
			t.Fatalf("pass %d erased %d (%v), want %d", i, n, err, want)
		}
	}
	for id, want := range map[string]bool{terminated: true, terminatedUnaccepted: true, forgotten: true, open: false, neverStarted: false, recent: false, sent: false} {
		var row struct {
			Content       []byte     `bun:"content"`
			SignedMessage []byte     `bun:"signed_message"`
			ErasedAt      *time.Time `bun:"erased_at"`
		}
		if err := st.DB.NewRaw("SELECT content, signed_message, erased_at FROM emails WHERE id = ?", id).Scan(ctx, &row); err != nil {
			t.Fatal(err)
		}
		if erased := row.ErasedAt != nil; erased != want || erased != (row.Content == nil) {
			t.Fatalf("email %s: erased at %v, content %d bytes; want erased %v", id, row.ErasedAt, len(row.Content), want)
		}
	}
}
