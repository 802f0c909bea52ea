package tracking_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

// An unsubscribe locks the statistics row before the suppression, like a
// complaint or a hard bounce of the same address, which count first and
// then suppress. It suppressed first, and deadlocked with a complaint of
// the same address on a connection of the same statistics shard. Lined up
// here: the complaint has counted, the unsubscribe comes and waits for the
// statistics row, then the complaint suppresses and commits.
func TestUnsubscribeBesideComplaintOfTheSameAddress(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	st := testenv.OpenStore(t, url)
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "acme", keyauth.WithSecret(secret, &store.APIKey{Label: "boot", Username: "acme", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: org.ID, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok", Status: store.DomainVerified}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	e := &store.Email{ID: uuid.NewString(), OrganizationID: org.ID, DomainID: d.ID, FromAddress: "hello@shop.example",
		Subject: "Sale", Source: store.SourceAPI, TrackUnsubscribe: true}
	if err := st.CreateEmail(ctx, e, []string{"ada@x.example"}); err != nil {
		t.Fatal(err)
	}

	// The recorder's store has one connection; the complaint takes one of
	// the other store's connections with the same shard.
	st.DB.SetMaxOpenConns(1)
	var recorderPID int
	if err := st.DB.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&recorderPID); err != nil {
		t.Fatal(err)
	}
	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	var conn bun.Conn
	var spare []bun.Conn
	for len(spare) < 200 {
		c, err := other.DB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		if err := c.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if pid%store.StatShards == recorderPID%store.StatShards {
			conn = c
			break
		}
		spare = append(spare, c)
	}
	for _, c := range spare {
		_ = c.Close()
	}
	if conn.Conn == nil {
		t.Fatal("no connection of the recorder's shard")
	}
	t.Cleanup(func() { _ = conn.Close() })

	complaint, err := conn.BeginTx(ctx, &sql.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = complaint.Rollback() })
	at := time.Now().UTC()
	if err := store.CountEmailEvent(ctx, complaint, org.ID, d.ID, store.StatComplained, at, 1); err != nil {
		t.Fatal(err)
	}

	r := &tracking.Recorder{Store: st}
	unsubscribed := make(chan error, 1)
	go func() {
		unsubscribed <- r.Unsubscribe(ctx, tracktoken.Token{Kind: tracktoken.Unsubscribe, EmailID: uuid.MustParse(e.ID), Recipient: 0})
	}()
	waitForLockWaiter(t, other.DB)
	suppressed := make(chan error, 1)
	go func() {
		err := store.Suppress(ctx, complaint, org.ID, "ada@x.example", store.SuppressionComplaint)
		if err == nil {
			err = complaint.Commit()
		}
		suppressed <- err
	}()
	for what, ch := range map[string]chan error{"complaint": suppressed, "unsubscribe": unsubscribed} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not finish", what)
		}
	}
	if t.Failed() {
		return
	}

	// Both counted; the complaint's suppression stays (an unsubscribe never
	// replaces another reason).
	days, err := st.Stats(ctx, org.ID, nil, at, at)
	if err != nil {
		t.Fatal(err)
	}
	if s := days[0].StatCounts; s.Complained != 1 || s.Unsubscribed != 1 {
		t.Fatalf("stats: %+v", s)
	}
	if among, _ := st.SuppressedAmong(ctx, org.ID, []string{"ada@x.example"}, false); !among["ada@x.example"] {
		t.Fatal("the complaint's suppression was replaced by the unsubscribe")
	}
	evs, _, err := st.EmailEvents(ctx, store.EmailScope{OrganizationID: org.ID}, e.ID, store.Page{Limit: 10})
	if err != nil || len(evs) != 1 || evs[0].EventType != "unsubscribed" {
		t.Fatalf("events %+v %v", evs, err)
	}
}

// waitForLockWaiter waits until a session of db's database waits for a lock.
func waitForLockWaiter(t *testing.T, db *bun.DB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting int
		if err := db.QueryRowContext(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the unsubscribe does not wait for the statistics row")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
