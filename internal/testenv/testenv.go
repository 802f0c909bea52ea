// Package testenv gives tests the real components they talk to: a throwaway
// PostgreSQL database, a PostgreSQL server of a test's own that it may stop
// and start (StartPostgres), a SQLite file, a Temporal dev server, and the
// real Temporal server on PostgreSQL (StartRealTemporal).
package testenv

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/temporaldev"
)

const defaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// PostgresURL creates an empty database for this test and drops it afterwards. It
// uses MAILYARD_TEST_DATABASE_URL (any database on the server: it is used to create
// the throwaway one) or the local server the development machines run.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := createDatabase(t, "mailyard_test_")
	return u.String()
}

// createDatabase creates a database named prefix + a random suffix on the test
// server, drops it when the test ends, and returns its URL.
func createDatabase(t testing.TB, prefix string) *url.URL {
	t.Helper()
	admin := os.Getenv("MAILYARD_TEST_DATABASE_URL")
	if admin == "" {
		admin = defaultAdminURL
	}
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(admin)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		t.Fatalf("PostgreSQL is not reachable at %s (%v).\nInstall and start it (apt-get install -y postgresql; pg_ctlcluster 15 main start) or set MAILYARD_TEST_DATABASE_URL.", admin, err)
	}
	name := prefix + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = db.Close()
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_ = db.Close()
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u
}

// SQLiteURL is a fresh SQLite database file in the test's temporary directory.
func SQLiteURL(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "mailyard.db")
}

// OpenStore opens and migrates a store at url, closed when the test ends.
func OpenStore(t testing.TB, databaseURL string) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// Dialects runs f once on PostgreSQL and once on SQLite.
func Dialects(t *testing.T, f func(t *testing.T, databaseURL string)) {
	t.Run("postgres", func(t *testing.T) { f(t, PostgresURL(t)) })
	t.Run("sqlite", func(t *testing.T) { f(t, SQLiteURL(t)) })
}

var (
	temporalOnce sync.Once
	temporalSrv  *temporaldev.Server
	temporalErr  error
)

// Temporal returns the address of a dev server shared by the tests of this
// package; StopTemporal (from TestMain) ends it.
func Temporal(t testing.TB) string {
	t.Helper()
	temporalOnce.Do(func() {
		temporalSrv, temporalErr = temporaldev.Start(context.Background(), temporaldev.Options{Headless: true})
	})
	if temporalErr != nil {
		t.Fatalf("Temporal dev server: %v", temporalErr)
	}
	return temporalSrv.Address
}

// OwnTemporal starts a Temporal dev server for this test alone and stops it when
// the test ends. Tests whose databases start ids at 1 need it when their
// workflows outlive them: workflow ids are business keys (domain-onboarding:1),
// and a long-running workflow left by one test would be joined by the next.
func OwnTemporal(t testing.TB) string {
	t.Helper()
	srv, err := temporaldev.Start(context.Background(), temporaldev.Options{Headless: true})
	if err != nil {
		t.Fatalf("Temporal dev server: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv.Address
}

// StopTemporal ends the shared dev server, if one was started.
func StopTemporal() {
	if temporalSrv != nil {
		temporalSrv.Stop()
	}
}

// Main is a TestMain that stops the shared Temporal server after the tests.
func Main(m interface{ Run() int }) {
	code := m.Run()
	StopTemporal()
	os.Exit(code)
}

// Eventually polls cond until it holds or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
