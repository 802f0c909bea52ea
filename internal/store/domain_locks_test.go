package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// The domain's row is locked before its records by every transaction that
// writes both (SaveChecks, SetDomainTracking), SetDomainTracking decides on
// the row as locked, not as read before, and a credential is stored with its
// domain's row locked against a concurrent deletion. The PostgreSQL tests
// hold a row lock of their own to line the transactions up in the order
// that deadlocked or lost an update before, then let them go.

// blockedOnLocks waits until n sessions of db's database wait for a lock.
func blockedOnLocks(t *testing.T, db bun.IDB, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting int
		if err := db.NewRaw("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").
			Scan(context.Background(), &waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock, want %d", waiting, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdRow locks a row (query selects it FOR UPDATE) in a transaction of its
// own and returns the function that commits it.
func holdRowLock(t *testing.T, st *store.Store, query string, args ...any) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := st.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.NewRaw(query, args...).Scan(ctx, &id); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			if err := tx.Commit(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// inBackground runs f in a goroutine; the channel gets its error.
func runAside(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

func awaitResult(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not finish", what)
		return nil
	}
}

// verifiedDomainWithRecords is a verified domain with records 1-4 and the
// custom tracking domain name (record 5).
func verifiedDomainWithRecords(t *testing.T, st *store.Store, org int64, name, tracking string) *store.Domain {
	t.Helper()
	ctx := context.Background()
	d := &store.Domain{OrganizationID: org, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: "tok-" + name, Status: store.DomainVerified}
	var records []store.DomainRecord
	for p := 1; p <= 4; p++ {
		records = append(records, store.DomainRecord{Position: p, Purpose: "test", Type: "TXT", Name: fmt.Sprintf("r%d.%s", p, name), Value: "v", Status: store.RecordVerified})
	}
	if err := st.CreateDomain(ctx, d, records); err != nil {
		t.Fatal(err)
	}
	setTrackingDomain(t, st, d, tracking)
	return d
}

func trackingChange(name string) store.TrackingSettings {
	return store.TrackingSettings{CustomDomainSet: true, CustomDomain: &name,
		CustomRecord: &store.DomainRecord{Purpose: "Tracking (CNAME)", Type: "CNAME", Name: name, Value: "t.mailyard.test"}}
}

func setTrackingDomain(t *testing.T, st *store.Store, d *store.Domain, name string) {
	t.Helper()
	if err := st.SetDomainTracking(context.Background(), d, trackingChange(name)); err != nil {
		t.Fatal(err)
	}
}

// roundOfChecks is a verification round's checks of records 1-5 as they are.
func roundOfChecks(t *testing.T, st *store.Store, id int64) []store.RecordCheck {
	t.Helper()
	records, err := st.DomainRecords(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var checks []store.RecordCheck
	for _, r := range records {
		checks = append(checks, store.RecordCheck{Position: r.Position, Name: r.Name, Status: store.RecordVerified, Observed: []string{r.Value}})
	}
	return checks
}

// A custom tracking domain changed while a verification round stores its
// checks: the round updated record 5 and then the domain's row, the change
// the row and then record 5 (40P01). Lined up: the round waits on record 5,
// the change comes, then both go.
func TestVerificationRoundAndTrackingChangeLockTheDomainFirst(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	org := newOrg(t, st, "acme")
	d := verifiedDomainWithRecords(t, st, org, "shop.example", "t1.shop.example")
	checks := roundOfChecks(t, st, d.ID)
	stale, err := st.DomainByID(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}

	release := holdRowLock(t, st, "SELECT domain_id FROM domain_records WHERE domain_id = ? AND position = ? FOR UPDATE", d.ID, store.TrackingRecordPosition)
	round := runAside(func() error {
		_, err := st.SaveChecks(ctx, d.ID, checks, time.Now().UTC())
		return err
	})
	blockedOnLocks(t, st.DB, 1)
	change := runAside(func() error { return st.SetDomainTracking(ctx, stale, trackingChange("t2.shop.example")) })
	blockedOnLocks(t, st.DB, 2)
	release()
	if err := awaitResult(t, "the round", round); err != nil {
		t.Errorf("verification round: %v", err)
	}
	if err := awaitResult(t, "the change", change); err != nil {
		t.Errorf("tracking change: %v", err)
	}
	if t.Failed() {
		return
	}
	// The round came first: the new record 5 waits for the next one.
	records, _ := st.DomainRecords(ctx, d.ID)
	if r := records[len(records)-1]; r.Position != store.TrackingRecordPosition || r.Name != "t2.shop.example" || r.Status != store.RecordPending {
		t.Fatalf("record 5 afterwards: %+v", r)
	}
	if after, _ := st.DomainByID(ctx, d.ID); after.LastCheckedAt == nil || nameOf(after.TrackingDomain) != "t2.shop.example" {
		t.Fatalf("domain afterwards: %+v", after)
	}
}

// The same race, free-running, on both databases: rounds of checks beside
// changes of the custom tracking domain, none failing.
func TestVerificationRoundsBesideTrackingChanges(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		d := verifiedDomainWithRecords(t, st, org, "shop.example", "t0.shop.example")
		rounds := 100
		if strings.HasPrefix(url, "sqlite://") {
			rounds = 10
		}
		var failed []string
		for r := range rounds {
			checks := roundOfChecks(t, st, d.ID)
			stale, err := st.DomainByID(ctx, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var roundErr, changeErr error
			start := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_, roundErr = st.SaveChecks(ctx, d.ID, checks, time.Now().UTC())
			}()
			go func() {
				defer wg.Done()
				<-start
				changeErr = st.SetDomainTracking(ctx, stale, trackingChange(fmt.Sprintf("t%d.shop.example", r+1)))
			}()
			close(start)
			wg.Wait()
			if roundErr != nil || changeErr != nil {
				failed = append(failed, fmt.Sprintf("round %d: checks %v, tracking %v", r, roundErr, changeErr))
			}
		}
		if len(failed) > 0 {
			t.Fatalf("%d of %d rounds failed:\n%s", len(failed), rounds, strings.Join(failed, "\n"))
		}
	})
}

// Two changes of the custom tracking domain at once, each from the domain
// as read before either: the second decided on that stale name and left
// the first one's certificates in the ACME cache. Whichever goes second
// must drop the first one's name.
func TestConcurrentTrackingChangesDropEveryReplacedName(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	org := newOrg(t, st, "acme")
	d := verifiedDomainWithRecords(t, st, org, "shop.example", "old.shop.example")
	names := []string{"old.shop.example", "a.shop.example", "b.shop.example"}
	for _, n := range names {
		for _, key := range []string{n, n + "+rsa"} {
			if err := st.PutACMECacheEntry(ctx, key, []byte("sealed")); err != nil {
				t.Fatal(err)
			}
		}
	}
	staleA, _ := st.DomainByID(ctx, d.ID)
	staleB, _ := st.DomainByID(ctx, d.ID)

	release := holdRowLock(t, st, "SELECT id FROM domains WHERE id = ? FOR UPDATE", d.ID)
	a := runAside(func() error { return st.SetDomainTracking(ctx, staleA, trackingChange("a.shop.example")) })
	blockedOnLocks(t, st.DB, 1)
	b := runAside(func() error { return st.SetDomainTracking(ctx, staleB, trackingChange("b.shop.example")) })
	blockedOnLocks(t, st.DB, 2)
	release()
	if err := awaitResult(t, "a", a); err != nil {
		t.Fatal(err)
	}
	if err := awaitResult(t, "b", b); err != nil {
		t.Fatal(err)
	}

	after, _ := st.DomainByID(ctx, d.ID)
	final := nameOf(after.TrackingDomain)
	if final != "a.shop.example" && final != "b.shop.example" {
		t.Fatalf("tracking domain afterwards %q", final)
	}
	for _, n := range names {
		for _, key := range []string{n, n + "+rsa"} {
			_, err := st.ACMECacheEntry(ctx, key)
			if kept, want := err == nil, n == final; kept != want {
				t.Errorf("cache entry %s kept=%v with %s the tracking domain, want %v", key, kept, final, want)
			}
		}
	}
	records, _ := st.DomainRecords(ctx, d.ID)
	if r := records[len(records)-1]; r.Position != store.TrackingRecordPosition || r.Name != final {
		t.Errorf("record 5 afterwards: %+v", r)
	}
	// Each caller's domain is the row as its change left it.
	for _, s := range []*store.Domain{staleA, staleB} {
		if got := nameOf(s.TrackingDomain); got != "a.shop.example" && got != "b.shop.example" {
			t.Errorf("caller's domain has tracking domain %q", got)
		}
	}
	if nameOf(staleA.TrackingDomain) == nameOf(staleB.TrackingDomain) {
		t.Errorf("both callers see %s", nameOf(staleA.TrackingDomain))
	}
}

func nameOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// CreateDomainCredential checks the domain as locked and stores the key only
// when the check passes.
func TestCreateDomainCredential(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org, other := newOrg(t, st, "acme"), newOrg(t, st, "other")
		verified := newDomain(t, st, org, "verified.example", store.DomainVerified)
		pending := newDomain(t, st, org, "pending.example", store.DomainPending)
		foreign := newDomain(t, st, other, "foreign.example", store.DomainVerified)
		deleted := newDomain(t, st, org, "deleted.example", store.DomainVerified)
		if _, err := st.DeleteDomainForCustomer(ctx, org, deleted); err != nil {
			t.Fatal(err)
		}
		refuse := errors.New("refused")
		for _, c := range []struct {
			domain   int64
			found    bool
			status   string
			stored   bool
			checkErr error
		}{
			{domain: verified, found: true, status: store.DomainVerified, stored: true},
			{domain: verified, found: true, status: store.DomainVerified, checkErr: refuse},
			{domain: pending, found: true, status: store.DomainPending, stored: true},
			{domain: foreign},
			{domain: deleted},
			{domain: 12345},
		} {
			key, _ := newTestKey(t, org, &c.domain, fmt.Sprintf("k%d", c.domain), "send")
			var seen *store.Domain
			var seenErr error
			err := st.CreateDomainCredential(ctx, key, func(d *store.Domain, err error) error {
				seen, seenErr = d, err
				if err != nil {
					return err
				}
				return c.checkErr
			})
			if c.found != (seen != nil) || c.found == (seenErr != nil) {
				t.Fatalf("domain %d: check got %+v, %v", c.domain, seen, seenErr)
			}
			if !c.found && !errors.Is(seenErr, store.ErrNotFound) {
				t.Fatalf("domain %d: check got %v, want not found", c.domain, seenErr)
			}
			if c.found && seen.Status != c.status {
				t.Fatalf("domain %d: check got status %s", c.domain, seen.Status)
			}
			switch {
			case c.stored && (err != nil || key.ID == 0 || key.Status != store.KeyActive):
				t.Fatalf("domain %d: %v, key %+v", c.domain, err, key)
			case !c.stored && err == nil:
				t.Fatalf("domain %d: stored", c.domain)
			}
			if c.checkErr != nil && !errors.Is(err, c.checkErr) {
				t.Fatalf("domain %d: %v, want the check's error", c.domain, err)
			}
		}
		var n int
		if err := st.DB.NewRaw("SELECT count(*) FROM api_keys WHERE sending_domain_id IS NOT NULL").Scan(ctx, &n); err != nil || n != 2 {
			t.Fatalf("%d scoped keys stored (%v), want 2", n, err)
		}
	})
}

// A credential created while its domain is deleted: either the deletion
// comes first and the credential is refused, or the credential comes first
// and the deletion revokes it. Never an active key of a deleted domain.
func TestCredentialRacingDomainDeletion(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		rounds := 40
		if strings.HasPrefix(url, "sqlite://") {
			rounds = 5
		}
		for r := range rounds {
			dom := newDomain(t, st, org, fmt.Sprintf("d%d.example", r), store.DomainVerified)
			key, _ := newTestKey(t, org, &dom, fmt.Sprintf("k%d", r), "send")
			var wg sync.WaitGroup
			var createErr, deleteErr error
			start := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				createErr = st.CreateDomainCredential(ctx, key, func(d *store.Domain, err error) error { return err })
			}()
			go func() {
				defer wg.Done()
				<-start
				_, deleteErr = st.DeleteDomainForCustomer(ctx, org, dom)
			}()
			close(start)
			wg.Wait()
			if deleteErr != nil || (createErr != nil && apperr.Code(createErr) != apperr.NotFound) {
				t.Fatalf("round %d: create %v, delete %v", r, createErr, deleteErr)
			}
			var active int
			if err := st.DB.NewRaw("SELECT count(*) FROM api_keys WHERE sending_domain_id = ? AND status = ?", dom, store.KeyActive).Scan(ctx, &active); err != nil {
				t.Fatal(err)
			}
			if active != 0 {
				t.Fatalf("round %d: an active key of the deleted domain (create %v)", r, createErr)
			}
		}
	})
}

// Lined up on PostgreSQL: the deletion waits for the domain's row, the
// credential comes after it; the credential sees the domain deleted.
func TestCredentialAfterDeletionWaitingForTheDomain(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	org := newOrg(t, st, "acme")
	dom := newDomain(t, st, org, "shop.example", store.DomainVerified)
	key, _ := newTestKey(t, org, &dom, "sender", "send")

	release := holdRowLock(t, st, "SELECT id FROM domains WHERE id = ? FOR UPDATE", dom)
	deletion := runAside(func() error {
		_, err := st.DeleteDomainForCustomer(ctx, org, dom)
		return err
	})
	blockedOnLocks(t, st.DB, 1)
	create := runAside(func() error {
		return st.CreateDomainCredential(ctx, key, func(d *store.Domain, err error) error { return err })
	})
	blockedOnLocks(t, st.DB, 2)
	release()
	if err := awaitResult(t, "the deletion", deletion); err != nil {
		t.Fatal(err)
	}
	if err := awaitResult(t, "the credential", create); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("credential for a domain deleted meanwhile: %v, want not found", err)
	}
	var n int
	if err := st.DB.NewRaw("SELECT count(*) FROM api_keys WHERE sending_domain_id = ?", dom).Scan(ctx, &n); err != nil || n != 0 {
		t.Fatalf("%d keys of the deleted domain (%v)", n, err)
	}
}

// A record whose look-up failed keeps its status, but a pending domain is
// not verified on it: record 1, verified in an earlier round and since
// removed behind a failing resolver, would otherwise count. The next round
// that reads every record verifies the domain.
func TestLookupFailureVerifiesNothing(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org := newOrg(t, st, "acme")
		d := &store.Domain{OrganizationID: org, Domain: "shop.example", MailFromSubdomain: "mail.shop.example", DKIMToken: "tok-shop", Status: store.DomainPending}
		var records []store.DomainRecord
		for p := 1; p <= 4; p++ {
			status := store.RecordPending
			if p == 1 {
				status = store.RecordVerified
			}
			records = append(records, store.DomainRecord{Position: p, Purpose: "test", Type: "TXT", Name: fmt.Sprintf("r%d.shop.example", p), Value: "v", Status: status})
		}
		if err := st.CreateDomain(ctx, d, records); err != nil {
			t.Fatal(err)
		}
		checks := roundOfChecks(t, st, d.ID)
		checks[0].Status, checks[0].Error = "", "the resolver answered SERVFAIL"
		if status, err := st.SaveChecks(ctx, d.ID, checks, time.Now().UTC()); err != nil || status != store.DomainPending {
			t.Fatalf("after a round whose look-up of record 1 failed: %s, %v; want pending", status, err)
		}
		if status, err := st.SaveChecks(ctx, d.ID, roundOfChecks(t, st, d.ID), time.Now().UTC()); err != nil || status != store.DomainVerified {
			t.Fatalf("after a round that read every record: %s, %v; want verified", status, err)
		}
	})
}
