// Package store is Mailyard's persistence: Bun models, embedded migrations and the
// queries the API and the activities need, on PostgreSQL (production, tests) and
// SQLite (the embedded default of `make run`).
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"modernc.org/sqlite" // also registers the pure-Go "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mailyard/mailyard/internal/apperr"
)

// The store's refusals are *apperr.Error values that name their resource
// ("domain not found"); the API answers them as they are. These sentinels stand
// for a whole code, for errors.Is: errors.Is(err, ErrNotFound) holds for every
// not-found error, whatever its resource.
var (
	ErrNotFound = &apperr.Error{Code: apperr.NotFound, Message: "resource not found"}
	ErrConflict = &apperr.Error{Code: apperr.Conflict, Message: "the resource's state does not allow this"}
)

// Store wraps the Bun database handle.
type Store struct {
	DB *bun.DB
}

// pgConnector is pgdriver's connector for a URL. pgdriver panics on a URL
// it cannot read (a password with an unencoded "/", a bad sslmode), and its
// message holds the URL, password included: the panic becomes an error
// that says neither.
func pgConnector(databaseURL string) (c *pgdriver.Connector, err error) {
	defer func() {
		if recover() != nil {
			c, err = nil, errors.New("the PostgreSQL URL cannot be read (percent-encode any /, ?, #, @, : or % in the user name or password; check sslmode and the certificate files it names)")
		}
	}()
	return pgdriver.NewConnector(pgdriver.WithDSN(databaseURL)), nil
}

// Open connects to a postgres:// or sqlite:// URL. It does not migrate.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	var db *bun.DB
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		connector, err := pgConnector(databaseURL)
		if err != nil {
			return nil, err
		}
		sqldb := sql.OpenDB(connector)
		sqldb.SetMaxOpenConns(32)
		sqldb.SetMaxIdleConns(32)
		sqldb.SetConnMaxIdleTime(5 * time.Minute)
		db = bun.NewDB(sqldb, pgdialect.New())
	case strings.HasPrefix(databaseURL, "sqlite://"):
		path := strings.TrimPrefix(databaseURL, "sqlite://")
		if path == "" {
			return nil, errors.New("sqlite:// needs a file path")
		}
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("create %s: %w", dir, err)
			}
		}
		// WAL lets readers run beside the one writer; immediate transactions take the
		// write lock up front so two writers wait (busy_timeout) instead of failing
		// with SQLITE_BUSY half-way through.
		q := url.Values{}
		q.Add("_pragma", "foreign_keys(1)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
		sqldb, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
		if err != nil {
			return nil, err
		}
		db = bun.NewDB(sqldb, sqlitedialect.New())
	default:
		return nil, errors.New("database URL must start with postgres:// or sqlite://")
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return &Store{DB: db}, nil
}

// Close releases the connections.
func (s *Store) Close() error { return s.DB.Close() }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.DB.PingContext(ctx) }

// IsPostgres tells which dialect is in use, for the few queries that differ.
func (s *Store) IsPostgres() bool { return s.DB.Dialect().Name().String() == "pg" }

// notFound turns sql.ErrNoRows into the not-found error of resource and leaves
// other errors alone.
func notFound(err error, resource string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return apperr.NotFoundf(resource)
	}
	return err
}

// isUniqueViolation recognises a unique-constraint failure on either database.
func isUniqueViolation(err error) bool {
	var pgErr pgdriver.Error
	if errors.As(err, &pgErr) {
		return pgErr.Field('C') == "23505"
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// IsBusy reports whether err is SQLite's "database is locked": a write
// that waited busy_timeout (10 s) for the one writer's lock, under more
// concurrent writers than the file takes. The caller should try again
// later, as after any database that cannot be reached.
func IsBusy(err error) bool {
	var sqliteErr *sqlite.Error
	return errors.As(err, &sqliteErr) && sqliteErr.Code()&0xff == sqlite3.SQLITE_BUSY
}

// now is the single clock of the store: UTC, truncated to microseconds so a value
// read back from either database equals the value written.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
