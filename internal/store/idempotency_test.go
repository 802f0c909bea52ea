package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestIdempotencyKeyClaims(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org, err := st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "b", Username: "b", Prefix: "p", Digest: []byte("d"), Permissions: store.Permissions{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		fp, otherFP := []byte("fingerprint-1"), []byte("fingerprint-2")
		held := map[string]store.IdempotencyClaim{}
		claim := func(key string, fp []byte) *store.IdempotencyKey {
			t.Helper()
			c, row, err := st.ClaimIdempotencyKey(ctx, org.ID, key, fp, time.Minute, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if row == nil {
				held[key] = c
			}
			return row
		}

		// Of concurrent claims exactly one wins.
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, row, err := st.ClaimIdempotencyKey(ctx, org.ID, "k1", fp, time.Minute, 24*time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if row == nil {
					mu.Lock()
					won++
					held["k1"] = c
					mu.Unlock()
				} else if row.ResponseStatus != nil || string(row.Fingerprint) != string(fp) {
					t.Errorf("in-flight row %+v", row)
				}
			}()
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("%d claims won", won)
		}

		// The answer is kept; later claims see it.
		if err := st.SaveIdempotentResponse(ctx, held["k1"], 201, []byte("sealed")); err != nil {
			t.Fatal(err)
		}
		row := claim("k1", otherFP)
		if row == nil || *row.ResponseStatus != 201 || string(row.ResponseEnc) != "sealed" || row.LockedUntil != nil || string(row.Fingerprint) != string(fp) {
			t.Fatalf("answered row %+v", row)
		}

		// A released claim can be claimed again.
		if claim("k2", fp) != nil {
			t.Fatal("first claim of k2 lost")
		}
		if err := st.ReleaseIdempotencyKey(ctx, held["k2"]); err != nil {
			t.Fatal(err)
		}
		if claim("k2", fp) != nil {
			t.Fatal("released key not claimable")
		}
		// A claim whose lock ran out (its process died) is taken over by the
		// same request, not by another one.
		if _, err := st.DB.NewUpdate().Model((*store.IdempotencyKey)(nil)).Set("locked_until = ?", time.Now().UTC().Add(-time.Second)).
			Where("idempotency_key = ?", "k2").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if row := claim("k2", otherFP); row == nil || row.ResponseStatus != nil {
			t.Fatalf("another request took over a dead claim: %+v", row)
		}
		if claim("k2", fp) != nil {
			t.Fatal("dead claim not taken over")
		}
		if row := claim("k2", fp); row == nil {
			t.Fatal("a taken-over claim is claimed twice")
		}

		// An expired key counts no more, and the sweep removes expired keys.
		if _, err := st.DB.NewUpdate().Model((*store.IdempotencyKey)(nil)).Set("expires_at = ?", time.Now().UTC().Add(-time.Second)).
			Where("idempotency_key = ?", "k1").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if claim("k1", otherFP) != nil {
			t.Fatal("expired key not claimable")
		}
		claim("k3", fp)
		if _, err := st.DB.NewUpdate().Model((*store.IdempotencyKey)(nil)).Set("expires_at = ?", time.Now().UTC().Add(-time.Second)).
			Where("idempotency_key IN (?, ?)", "k1", "k3").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := st.DeleteExpiredIdempotencyKeys(ctx, time.Now()); err != nil || n != 2 {
			t.Fatalf("swept %d (%v)", n, err)
		}
		if _, err := st.IdempotencyKey(ctx, org.ID, "k2"); err != nil {
			t.Fatalf("sweep removed a live key: %v", err)
		}
	})
}

// A webhook created with an answer saved in its transaction: both commit, or
// neither when the key was answered meanwhile; a live claim is renewed.
func TestIdempotentAnswerCommitsWithTheWebhook(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		org, err := st.CreateOrganizationWithKey(ctx, "acme", &store.APIKey{Label: "b", Username: "b", Prefix: "p", Digest: []byte("d"), Permissions: store.Permissions{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		held, row, err := st.ClaimIdempotencyKey(ctx, org.ID, "k", []byte("fp"), time.Second, time.Hour)
		if err != nil || row != nil {
			t.Fatalf("claim: %v %v", row, err)
		}
		if err := st.ExtendIdempotencyClaim(ctx, held, time.Hour); err != nil {
			t.Fatal(err)
		}
		if row, _ := st.IdempotencyKey(ctx, org.ID, "k"); row.LockedUntil == nil || time.Until(*row.LockedUntil) < 50*time.Minute {
			t.Fatalf("claim not renewed: %+v", row)
		}
		create := func(u string) (*store.Webhook, error) {
			w := &store.Webhook{OrganizationID: org.ID, URL: u, EventTypes: []string{"delivered"}}
			hookCtx := store.WithCommitHook(ctx, func(ctx context.Context, tx bun.Tx) error {
				saved, err := store.SaveIdempotentResponseIn(ctx, tx, held, 201, []byte("answer"))
				if err == nil && !saved {
					err = errors.New("answered meanwhile")
				}
				return err
			})
			return w, st.CreateWebhook(hookCtx, w, 20, func(int64) ([]byte, error) { return []byte("secret"), nil })
		}
		if _, err := create("https://a.example/1"); err != nil {
			t.Fatal(err)
		}
		// The answer is stored and the claim still locked: the request may
		// yet undo the creation, and a retry waits until it ends.
		row, _ = st.IdempotencyKey(ctx, org.ID, "k")
		if row.ResponseStatus == nil || *row.ResponseStatus != 201 || string(row.ResponseEnc) != "answer" || row.LockedUntil == nil || row.Answered(time.Now()) {
			t.Fatalf("key after the creation: %+v", row)
		}
		if !row.Answered(row.LockedUntil.Add(time.Microsecond)) {
			t.Fatalf("the answer does not count once the lock runs out: %+v", row)
		}
		// A second creation under the answered key rolls back.
		if _, err := create("https://a.example/2"); err == nil || err.Error() != "answered meanwhile" {
			t.Fatalf("second creation: %v", err)
		}
		if n, err := st.DB.NewSelect().Model((*store.Webhook)(nil)).Count(ctx); err != nil || n != 1 {
			t.Fatalf("%d webhooks: %v", n, err)
		}
	})
}

// A request whose claim was taken over (its process stalled past the lock)
// changes nothing of the request that holds the key now: it cannot renew,
// answer, take back or release it.
func TestATakenOverClaimIsNoLongerTheStalledRequests(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		orgID := newOrg(t, st, "acme")
		fp := []byte("fp")
		stalled, row, err := st.ClaimIdempotencyKey(ctx, orgID, "k", fp, time.Minute, time.Hour)
		if err != nil || row != nil {
			t.Fatalf("first claim: %v %v", row, err)
		}
		if _, err := st.DB.NewUpdate().Model((*store.IdempotencyKey)(nil)).Set("locked_until = ?", time.Now().UTC().Add(-time.Second)).
			Where("idempotency_key = ?", "k").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		current, row, err := st.ClaimIdempotencyKey(ctx, orgID, "k", fp, time.Minute, time.Hour)
		if err != nil || row != nil {
			t.Fatalf("takeover: %v %v", row, err)
		}
		if current.Token == stalled.Token {
			t.Fatal("the takeover kept the stalled request's token")
		}
		key := func() *store.IdempotencyKey {
			t.Helper()
			row, err := st.IdempotencyKey(ctx, orgID, "k")
			if err != nil {
				t.Fatal(err)
			}
			return row
		}
		lockedUntil := *key().LockedUntil

		// The stalled request wakes up and goes on.
		if err := st.ExtendIdempotencyClaim(ctx, stalled, time.Hour); err != nil {
			t.Fatal(err)
		}
		if row := key(); !row.LockedUntil.Equal(lockedUntil) {
			t.Fatalf("the stalled request renewed the new claim: %v, was %v", row.LockedUntil, lockedUntil)
		}
		err = st.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			saved, err := store.SaveIdempotentResponseIn(ctx, tx, stalled, 201, []byte("stalled"))
			if err == nil && saved {
				err = errors.New("the stalled request stored its answer in the new claim")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, write := range []func() error{
			func() error { return st.SaveIdempotentResponse(ctx, stalled, 201, []byte("stalled")) },
			func() error { return st.ReplaceIdempotentResponse(ctx, stalled, 201, []byte("stalled")) },
			func() error { return st.ReleaseIdempotencyKey(ctx, stalled) },
		} {
			if err := write(); err != nil {
				t.Fatal(err)
			}
			if row := key(); row.ResponseStatus != nil || row.LockedUntil == nil {
				t.Fatalf("the stalled request changed the new claim: %+v", row)
			}
		}

		// The request holding the key answers it; the stalled one cannot take
		// the answer back.
		err = st.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			saved, err := store.SaveIdempotentResponseIn(ctx, tx, current, 201, []byte("current"))
			if err == nil && !saved {
				err = errors.New("the holder could not store its answer")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.UnanswerIdempotencyKey(ctx, stalled); err != nil {
			t.Fatal(err)
		}
		if row := key(); row.ResponseStatus == nil || string(row.ResponseEnc) != "current" {
			t.Fatalf("the stalled request took back the holder's answer: %+v", row)
		}
		if err := st.ReplaceIdempotentResponse(ctx, current, 201, []byte("as sent")); err != nil {
			t.Fatal(err)
		}
		if row := key(); row.ResponseStatus == nil || string(row.ResponseEnc) != "as sent" || !row.Answered(time.Now()) {
			t.Fatalf("the holder's answer: %+v", row)
		}
	})
}
