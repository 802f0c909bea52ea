package store_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestMigrationsApplyOnceAndGateStart(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.EnsureCurrent(ctx); err == nil {
			t.Fatal("an empty database passes EnsureCurrent")
		}
		applied, err := st.Migrate(ctx)
		if err != nil || len(applied) == 0 {
			t.Fatalf("migrate: %v %v", applied, err)
		}
		if err := st.EnsureCurrent(ctx); err != nil {
			t.Fatal(err)
		}
		again, err := st.Migrate(ctx)
		if err != nil || len(again) != 0 {
			t.Fatalf("second migrate applied %v (%v)", again, err)
		}
	})
}

func TestAPIKeyLifecycle(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		secret, _ := keys.NewAPIKey()
		key := keyauth.WithSecret(secret, &store.APIKey{Label: "boot", Username: "u", Permissions: store.Permissions{"admin", "send"}})
		org, err := st.CreateOrganizationWithKey(ctx, "acme", key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.ActiveAPIKeyByDigest(ctx, keys.Digest(secret))
		if err != nil {
			t.Fatal(err)
		}
		if got.OrganizationID != org.ID || !got.Permissions.Has("admin") || !got.Permissions.Has("send") || got.Permissions.Has("stats") {
			t.Fatalf("key read back as %+v", got)
		}
		if _, err := st.ActiveAPIKeyByDigest(ctx, keys.Digest(secret+"x")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown digest: %v", err)
		}
		if got.Domain != nil {
			t.Fatalf("an organization-wide key came with domain %+v", got.Domain)
		}

		// A key scoped to a domain comes with the domain, until it is deleted.
		domain := newDomain(t, st, org.ID, "x.example", store.DomainVerified)
		scoped, scopedSecret := newTestKey(t, org.ID, &domain, "send", "send")
		if err := st.CreateCredential(ctx, scoped); err != nil {
			t.Fatal(err)
		}
		got, err = st.ActiveAPIKeyByDigest(ctx, keys.Digest(scopedSecret))
		if err != nil || got.Domain == nil || got.Domain.ID != domain || got.Domain.Domain != "x.example" || got.Domain.Status != store.DomainVerified {
			t.Fatalf("scoped key read back as %+v (domain %+v), %v", got, got.Domain, err)
		}
		if _, err := st.DB.NewUpdate().Model((*store.Domain)(nil)).Set("deleted_at = ?", time.Now()).Where("id = ?", domain).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err = st.ActiveAPIKeyByDigest(ctx, keys.Digest(scopedSecret)); err != nil || got.Domain != nil || got.SendingDomainID == nil {
			t.Fatalf("key of a deleted domain read back with domain %+v, %v", got.Domain, err)
		}

		// last_used_at: written once, then not again within the interval.
		t0 := time.Now().UTC().Truncate(time.Microsecond)
		if ok, err := st.TouchAPIKey(ctx, key.ID, t0, time.Minute); err != nil || !ok {
			t.Fatalf("first touch %v %v", ok, err)
		}
		if ok, _ := st.TouchAPIKey(ctx, key.ID, t0.Add(30*time.Second), time.Minute); ok {
			t.Fatal("second touch within a minute wrote")
		}
		if ok, _ := st.TouchAPIKey(ctx, key.ID, t0.Add(61*time.Second), time.Minute); !ok {
			t.Fatal("touch after a minute did not write")
		}
		got, _ = st.ActiveAPIKeyByDigest(ctx, keys.Digest(secret))
		if got.LastUsedAt == nil || !got.LastUsedAt.Equal(t0.Add(61*time.Second)) {
			t.Fatalf("last_used_at %v", got.LastUsedAt)
		}

		// The digest is unique.
		dup := &store.APIKey{OrganizationID: org.ID, Label: "d", Username: "d", Prefix: "p", Digest: keys.Digest(secret), Permissions: store.Permissions{"admin"}}
		if _, err := st.CreateOrganizationWithKey(ctx, "other", dup); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate digest: %v", err)
		}
		// ...and the failed transaction left no organization behind.
		if _, err := st.OrganizationByName(ctx, "other"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("half-written organization: %v", err)
		}
	})
}

// A PostgreSQL URL that pgdriver cannot read made it panic, with the URL
// (password included) in the message; it is an error that says neither.
func TestOpenRefusesAnUnreadableURLQuietly(t *testing.T) {
	for _, bad := range []string{"postgres://mailyard:ab/c+d=@db/mailyard", "postgres://u:secret@db/x?sslmode=sometimes"} {
		_, err := store.Open(context.Background(), bad)
		if err == nil || strings.Contains(err.Error(), "ab/c") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// SQLite's "database is locked" (a writer that waited out busy_timeout for
// the one write lock) is recognized, so the API answers it 503 and the
// client sends again, instead of a 500.
func TestIsBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	holder, other := open(), open()
	if _, err := holder.Exec("CREATE TABLE t (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = other.Begin()
	if !store.IsBusy(err) {
		t.Fatalf("a second writer: %v, not recognized as busy", err)
	}
	if store.IsBusy(errors.New("database is locked")) || store.IsBusy(nil) {
		t.Fatal("IsBusy matched what is not SQLite's busy error")
	}
}
