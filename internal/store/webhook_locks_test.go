package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// Lock order of the webhook lifecycle on PostgreSQL: a transaction that may
// disable a webhook locks the webhook before any of its deliveries, and rows
// are locked FOR NO KEY UPDATE, so that the foreign key checks of concurrent
// inserts (FOR KEY SHARE) never wait for them. Each race below deadlocked
// (SQLSTATE 40P01) in most rounds before; SQLite serialises writers and runs
// the same races for their outcome.

// lockRounds is how many rounds a race runs: enough on PostgreSQL for the
// old lock order to deadlock in practically every run, few on SQLite.
func lockRounds(url string, postgres int) int {
	if strings.HasPrefix(url, "sqlite://") {
		return 2
	}
	return postgres
}

// openRaceStore opens a store whose pool keeps its connections, so that a
// race's transactions start together instead of each opening one.
func openRaceStore(t *testing.T, url string) *store.Store {
	st := testenv.OpenStore(t, url)
	st.DB.SetMaxIdleConns(16)
	return st
}

// race runs fs at once and returns their errors.
func race(fs ...func() error) []error {
	errs := make([]error, len(fs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f()
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// raceRounds runs round rounds times. round races its transactions and
// returns their errors; when none failed it checks the outcome itself. A
// failed race is counted, not fatal, so that the test reports how often
// the transactions deadlock.
func raceRounds(t *testing.T, rounds int, round func(round int) []error) {
	t.Helper()
	var failed []string
	for r := range rounds {
		var deadlocks int
		var other []error
		errs := round(r)
		for _, err := range errs {
			switch {
			case err == nil:
			case strings.Contains(err.Error(), "40P01"):
				deadlocks++
			default:
				other = append(other, err)
			}
		}
		if deadlocks > 0 || len(other) > 0 {
			failed = append(failed, fmt.Sprintf("round %d: %d of %d deadlocked (40P01), other errors %v", r, deadlocks, len(errs), other))
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d rounds failed:\n%s", len(failed), rounds, strings.Join(failed, "\n"))
	}
}

// lockFixture is an organization with webhooks, each with pending deliveries.
type lockFixture struct {
	org        int64
	hooks      []*store.Webhook
	deliveries map[int64][]string // by webhook id
}

func newLockFixture(t *testing.T, st *store.Store, name string, hooks, deliveries int, types store.EventTypes) *lockFixture {
	t.Helper()
	ctx := context.Background()
	f := &lockFixture{org: newOrg(t, st, name), deliveries: map[int64][]string{}}
	for i := range hooks {
		// Healthy an hour ago, so that a final attempt may disable it.
		w := &store.Webhook{OrganizationID: f.org, URL: fmt.Sprintf("https://h%d.example/x", i), EventTypes: types,
			CreatedAt: time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)}
		if err := st.CreateWebhook(ctx, w, 100, sealID); err != nil {
			t.Fatal(err)
		}
		f.hooks = append(f.hooks, w)
		for range deliveries {
			id, _ := newDeliveryID()
			if err := st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: f.org, WebhookID: w.ID, EventType: "delivered", Body: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			f.deliveries[w.ID] = append(f.deliveries[w.ID], id)
		}
	}
	return f
}

// checkDeliveries fails the test unless every delivery of w is in status.
func checkDeliveries(t *testing.T, st *store.Store, w int64, ids []string, status string) {
	t.Helper()
	for _, id := range ids {
		d, err := st.DeliveryOfWebhook(context.Background(), w, id)
		if err != nil || d.Status != status {
			t.Fatalf("delivery %s of webhook %d: %+v %v, want %s", id, w, d, err, status)
		}
	}
}

// announceDisable is the OnDisable of the API and the delivery activity
// (platformevents.StageDisable): it stores the webhook.disabled event and
// a delivery of it to every other enabled webhook of the organization that
// subscribes to it.
func announceDisable(ctx context.Context, tx bun.Tx, w *store.Webhook) error {
	ev := &store.PlatformEvent{EventKey: fmt.Sprintf("webhook.disabled:%d:%d", w.ID, w.DisableCount),
		OrganizationID: w.OrganizationID, EventType: "webhook.disabled", OccurredAt: time.Now().UTC()}
	_, _, err := store.StorePlatformEvent(ctx, tx, ev, []byte(`{}`), w.ID, newDeliveryID)
	return err
}

// failingAttempt records an attempt at a delivery whose receiver said 410
// (gone is true) or whose last attempt failed after the webhook's failure
// clock ran out: either may disable the webhook.
func failingAttempt(st *store.Store, w int64, delivery string, gone bool, onDisable store.OnDisable) (*store.Webhook, error) {
	code, effect := 500, store.AttemptEffect{Status: store.DeliveryFailed, DisableIfUnhealthySince: time.Now().UTC()}
	if gone {
		code, effect = 410, store.AttemptEffect{Status: store.DeliveryFailed, Disable: store.DisabledReceiverGone}
	}
	return st.RecordAttempt(context.Background(), &store.DeliveryAttempt{DeliveryID: delivery, AttemptedAt: time.Now().UTC(), StatusCode: &code}, w, effect, onDisable)
}

// Attempts at different deliveries of one webhook that each may disable it:
// one disables it, the others find it disabled, none deadlocks.
func TestConcurrentDisablingAttemptsOfOneWebhook(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		st := openRaceStore(t, url)
		const attempts = 8
		raceRounds(t, lockRounds(url, 12), func(round int) []error {
			gone := round%2 == 0
			f := newLockFixture(t, st, fmt.Sprintf("attempts-%d", round), 1, attempts, store.EventTypes{"delivered", "webhook.disabled"})
			w := f.hooks[0]
			var disabled atomic.Int32
			fs := make([]func() error, attempts)
			for i, id := range f.deliveries[w.ID] {
				fs[i] = func() error {
					got, err := failingAttempt(st, w.ID, id, gone, announceDisable)
					if got != nil {
						disabled.Add(1)
					}
					return err
				}
			}
			if errs := race(fs...); !allNil(errs) {
				return errs
			}
			if n := disabled.Load(); n != 1 {
				t.Fatalf("round %d: %d attempts disabled the webhook, want 1", round, n)
			}
			checkWebhook(t, st, f.org, w.ID, store.WebhookDisabled)
			checkDeliveries(t, st, w.ID, f.deliveries[w.ID], store.DeliveryFailed)
			return nil
		})
	})
}

// Deleting a webhook while attempts at its deliveries may disable it.
func TestDeleteWebhookRacesDisablingAttempts(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		st := openRaceStore(t, url)
		const attempts = 4
		raceRounds(t, lockRounds(url, 12), func(round int) []error {
			gone := round%2 == 0
			f := newLockFixture(t, st, fmt.Sprintf("delete-%d", round), 1, attempts, store.EventTypes{"delivered"})
			w := f.hooks[0]
			fs := []func() error{func() error {
				_, _, err := st.DeleteWebhook(context.Background(), f.org, w.ID)
				return err
			}}
			for _, id := range f.deliveries[w.ID] {
				fs = append(fs, func() error {
					_, err := failingAttempt(st, w.ID, id, gone, announceDisable)
					return err
				})
			}
			if errs := race(fs...); !allNil(errs) {
				return errs
			}
			if _, err := st.WebhookInOrganization(context.Background(), f.org, w.ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("round %d: deleted webhook still found: %v", round, err)
			}
			checkDeliveries(t, st, w.ID, f.deliveries[w.ID], store.DeliveryFailed)
			return nil
		})
	})
}

// Webhooks of one organization, all subscribed to webhook.disabled,
// disabled at once (by the API, or half of them by 410s): each announces its
// disable to the others, inserting deliveries that reference their rows.
func TestConcurrentDisablesAnnounceToEachOther(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		st := openRaceStore(t, url)
		ctx := context.Background()
		off := store.WebhookDisabled
		const hooks = 4
		raceRounds(t, lockRounds(url, 12), func(round int) []error {
			f := newLockFixture(t, st, fmt.Sprintf("announce-%d", round), hooks, 1, store.EventTypes{"delivered", "webhook.disabled"})
			fs := make([]func() error, hooks)
			for i, w := range f.hooks {
				byAttempt := round%2 == 1 && i%2 == 1
				fs[i] = func() error {
					if byAttempt {
						_, err := failingAttempt(st, w.ID, f.deliveries[w.ID][0], true, announceDisable)
						return err
					}
					_, _, _, err := st.UpdateWebhook(ctx, f.org, w.ID, store.WebhookPatch{Status: &off}, announceDisable)
					return err
				}
			}
			if errs := race(fs...); !allNil(errs) {
				return errs
			}
			announced := 0
			for _, w := range f.hooks {
				checkWebhook(t, st, f.org, w.ID, store.WebhookDisabled)
				ds, _, err := st.ListDeliveries(ctx, w.ID, store.Page{Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					if d.EventType == "webhook.disabled" {
						announced++
					}
				}
			}
			// The k-th disable to commit saw the hooks-k that commit after
			// it enabled, and no disable announces to its own webhook.
			if announced < hooks*(hooks-1)/2 || announced > hooks*(hooks-1) {
				t.Fatalf("round %d: %d webhook.disabled deliveries, want %d to %d", round, announced, hooks*(hooks-1)/2, hooks*(hooks-1))
			}
			return nil
		})
	})
}

// 2xx attempts that restart the failure clock (a one-statement update of the
// delivery and the webhook) racing attempts and an update that disable the
// webhook.
func TestHealthyAttemptsRaceDisables(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		st := openRaceStore(t, url)
		ctx := context.Background()
		off := store.WebhookDisabled
		const healthy, failing = 4, 4
		raceRounds(t, lockRounds(url, 8), func(round int) []error {
			f := newLockFixture(t, st, fmt.Sprintf("healthy-%d", round), 1, healthy+failing, store.EventTypes{"delivered"})
			w := f.hooks[0]
			fs := []func() error{func() error {
				_, _, _, err := st.UpdateWebhook(ctx, f.org, w.ID, store.WebhookPatch{Status: &off}, announceDisable)
				return err
			}}
			for i, id := range f.deliveries[w.ID] {
				fs = append(fs, func() error {
					if i >= healthy {
						_, err := failingAttempt(st, w.ID, id, true, announceDisable)
						return err
					}
					code := 200
					_, err := st.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: id, AttemptedAt: time.Now().UTC(), StatusCode: &code}, w.ID,
						store.AttemptEffect{Status: store.DeliveryDelivered, Healthy: true, HealthyAt: w.HealthyAt}, nil)
					return err
				})
			}
			if errs := race(fs...); !allNil(errs) {
				return errs
			}
			checkWebhook(t, st, f.org, w.ID, store.WebhookDisabled)
			return nil
		})
	})
}

func allNil(errs []error) bool {
	for _, err := range errs {
		if err != nil {
			return false
		}
	}
	return true
}

// checkWebhook fails the test unless the webhook is in status, disabled once.
func checkWebhook(t *testing.T, st *store.Store, org, id int64, status string) {
	t.Helper()
	got, err := st.WebhookInOrganization(context.Background(), org, id)
	if err != nil || got.Status != status || got.DisableCount != 1 {
		t.Fatalf("webhook %+v %v, want %s and disabled once", got, err, status)
	}
}

// A 2xx attempt that restarts the failure clock waits for the webhook's row
// before it locks its delivery's: the order of the transactions that
// disable the webhook.
func TestHealthyAttemptLocksWebhookBeforeDelivery(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	f := newLockFixture(t, st, "acme", 1, 1, store.EventTypes{"delivered"})
	w, id := f.hooks[0], f.deliveries[f.hooks[0].ID][0]
	tx, err := st.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM webhooks WHERE id = ? FOR NO KEY UPDATE", w.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		code := 200
		_, err := st.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: id, AttemptedAt: time.Now().UTC(), StatusCode: &code}, w.ID,
			store.AttemptEffect{Status: store.DeliveryDelivered, Healthy: true, HealthyAt: w.HealthyAt}, nil)
		done <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the attempt waits for the webhook", func() bool {
		var n int
		err := st.DB.NewRaw("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(ctx, &n)
		return err == nil && n > 0
	})
	if _, err := st.DB.ExecContext(ctx, "SELECT 1 FROM deliveries WHERE id = ? FOR NO KEY UPDATE NOWAIT", id); err != nil {
		t.Fatalf("the delivery is locked while the attempt waits for its webhook: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkDeliveries(t, st, w.ID, []string{id}, store.DeliveryDelivered)
}

// What a foreign key check takes on the row an uncommitted insert references
// (FOR KEY SHARE) does not hold up the transactions that lock the row to
// change it, and they do not hold up such inserts.
func TestRowLocksLeaveForeignKeyChecksAlone(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	f := newLockFixture(t, st, "acme", 2, 0, store.EventTypes{"delivered"})
	w := f.hooks[0]
	d := &store.Domain{OrganizationID: f.org, Domain: "x.example", Status: store.DomainVerified, MailFromSubdomain: "mail.x.example", DKIMToken: "token"}
	if err := st.CreateDomain(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	// An insert in flight: a delivery for the webhook (its organization and
	// webhook rows are FOR KEY SHARE) and what an insert referencing the
	// domain takes.
	tx, err := st.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	id, _ := newDeliveryID()
	if _, err := tx.NewInsert().Model(&store.Delivery{ID: id, OrganizationID: f.org, WebhookID: w.ID, EventType: "delivered",
		Body: []byte(`{}`), Status: store.DeliveryPending, CreatedAt: time.Now().UTC()}).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM domains WHERE id = ? FOR KEY SHARE", d.ID); err != nil {
		t.Fatal(err)
	}

	step := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := f(ctx); err != nil {
			t.Errorf("%s beside an uncommitted insert: %v", what, err)
		}
	}
	step("CreateWebhook", func(ctx context.Context) error {
		return st.CreateWebhook(ctx, &store.Webhook{OrganizationID: f.org, URL: "https://new.example/x", EventTypes: store.EventTypes{"delivered"}}, 100, sealID)
	})
	step("RotateWebhookSecret", func(ctx context.Context) error {
		_, err := st.RotateWebhookSecret(ctx, f.org, w.ID, store.Rotation{ExpireIn: time.Hour, MaxPrevious: 2,
			Reseal: func(enc []byte, prevID int64) ([]byte, error) { return enc, nil }, SealNew: sealID})
		return err
	})
	step("UpdateWebhook", func(ctx context.Context) error {
		url := "https://moved.example/x"
		_, _, _, err := st.UpdateWebhook(ctx, f.org, w.ID, store.WebhookPatch{URL: &url}, nil)
		return err
	})
	step("FinishRotation", func(ctx context.Context) error { return st.FinishRotation(ctx, d.ID, 0) })
	step("DeleteDomainForCustomer", func(ctx context.Context) error {
		_, err := st.DeleteDomainForCustomer(ctx, f.org, d.ID)
		return err
	})
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// The other way round: an insert referencing a webhook whose update is
	// under way (onDisable runs in the update's transaction) goes through.
	off := store.WebhookDisabled
	other := f.hooks[1]
	if _, _, _, err := st.UpdateWebhook(ctx, f.org, other.ID, store.WebhookPatch{Status: &off}, func(_ context.Context, _ bun.Tx, _ *store.Webhook) error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		id, _ := newDeliveryID()
		return st.CreateDelivery(ctx, &store.Delivery{ID: id, OrganizationID: f.org, WebhookID: other.ID, EventType: "delivered", Body: []byte(`{}`)})
	}); err != nil {
		t.Fatalf("a delivery inserted beside the disable: %v", err)
	}
}

// The weaker locks still make the changes of one row take turns: an update
// of a webhook waits for a rotation of its secret under way.
func TestWebhookChangesStillTakeTurns(t *testing.T) {
	ctx := context.Background()
	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	f := newLockFixture(t, st, "acme", 1, 0, store.EventTypes{"delivered"})
	w := f.hooks[0]
	sealing, release := make(chan struct{}), make(chan struct{})
	rotated := make(chan error, 1)
	go func() {
		_, err := st.RotateWebhookSecret(ctx, f.org, w.ID, store.Rotation{ExpireIn: time.Hour, MaxPrevious: 2,
			Reseal: func(enc []byte, prevID int64) ([]byte, error) { return enc, nil },
			SealNew: func(id int64) ([]byte, error) {
				close(sealing)
				<-release
				return []byte("rotated"), nil
			}})
		rotated <- err
	}()
	<-sealing
	updated := make(chan error, 1)
	go func() {
		url := "https://moved.example/x"
		_, _, _, err := st.UpdateWebhook(ctx, f.org, w.ID, store.WebhookPatch{URL: &url}, nil)
		updated <- err
	}()
	select {
	case err := <-updated:
		t.Fatalf("the update did not wait for the rotation: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-rotated; err != nil {
		t.Fatal(err)
	}
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	got, err := st.WebhookInOrganization(ctx, f.org, w.ID)
	if err != nil || string(got.SecretEnc) != "rotated" || got.URL != "https://moved.example/x" {
		t.Fatalf("webhook %+v %v", got, err)
	}
}

// The sweep of expired previous secrets skips rows another transaction
// holds (a rotation of that webhook deletes its expired secrets too, maybe in
// another order: waiting could deadlock). It erases the rest at once, and
// the held rows on a later pass.
func TestEraseSweepSkipsHeldSecrets(t *testing.T) {
	st := openRaceStore(t, testenv.PostgresURL(t))
	ctx := context.Background()
	f := newLockFixture(t, st, "erase", 1, 0, store.EventTypes{"delivered"})
	past := time.Now().UTC().Add(-time.Hour)
	var ids []int64
	for range 3 {
		row := &store.PreviousSecret{WebhookID: f.hooks[0].ID, SecretEnc: []byte("x"), ReplacedAt: past.Add(-time.Hour), ExpiresAt: past}
		if _, err := st.DB.NewInsert().Model(row).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, row.ID)
	}
	tx, err := st.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.NewSelect().Model((*store.PreviousSecret)(nil)).Column("id").Where("id = ?", ids[0]).For("UPDATE").Exec(ctx); err != nil {
		t.Fatal(err)
	}

	sweepCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if n, err := st.ErasePreviousSecrets(sweepCtx); err != nil || n != 2 {
		t.Fatalf("sweep beside a held row: %d erased, %v; want the 2 others at once", n, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n, err := st.ErasePreviousSecrets(ctx); err != nil || n != 1 {
		t.Fatalf("next sweep: %d erased, %v; want the one left", n, err)
	}
}
