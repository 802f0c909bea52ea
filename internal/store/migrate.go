package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/uptrace/bun/migrate"
)

//go:embed migrations
var migrationFiles embed.FS

func (s *Store) migrator() (*migrate.Migrator, error) {
	dir := "migrations/sqlite"
	if s.IsPostgres() {
		dir = "migrations/postgres"
	}
	sub, err := fs.Sub(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	ms := migrate.NewMigrations()
	if err := ms.Discover(sub); err != nil {
		return nil, err
	}
	return migrate.NewMigrator(s.DB, ms, migrate.WithMarkAppliedOnSuccess(true)), nil
}

// Migrate applies every pending migration and returns the names it applied.
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	m, err := s.migrator()
	if err != nil {
		return nil, err
	}
	if err := m.Init(ctx); err != nil {
		return nil, fmt.Errorf("init migrations: %w", err)
	}
	if err := m.Lock(ctx); err != nil {
		return nil, fmt.Errorf("lock migrations: %w", err)
	}
	defer m.Unlock(ctx) //nolint:errcheck // the lock row goes with the process anyway
	group, err := m.Migrate(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var names []string
	for _, mg := range group.Migrations {
		names = append(names, mg.Name)
	}
	return names, nil
}

// MigrationAppliedAt returns when the migration name (its version, as
// "20261125000010") was applied to this database.
func (s *Store) MigrationAppliedAt(ctx context.Context, name string) (time.Time, error) {
	m, err := s.migrator()
	if err != nil {
		return time.Time{}, err
	}
	applied, err := m.AppliedMigrations(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read applied migrations: %w", err)
	}
	for _, mg := range applied {
		if mg.Name == name {
			return mg.MigratedAt, nil
		}
	}
	return time.Time{}, fmt.Errorf("migration %s: %w", name, ErrNotFound)
}

// Pending lists the migrations not yet applied.
func (s *Store) Pending(ctx context.Context) ([]string, error) {
	m, err := s.migrator()
	if err != nil {
		return nil, err
	}
	if err := m.Init(ctx); err != nil {
		return nil, fmt.Errorf("read migration status: %w", err)
	}
	all, err := m.MigrationsWithStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("read migration status: %w", err)
	}
	var names []string
	for _, mg := range all.Unapplied() {
		names = append(names, mg.Name)
	}
	return names, nil
}

// EnsureCurrent refuses a schema that is behind this binary, so a process never runs
// queries against tables it expects but that do not exist yet.
func (s *Store) EnsureCurrent(ctx context.Context) error {
	pending, err := s.Pending(ctx)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return fmt.Errorf("database schema is behind (%d pending: %s): run `mailyard migrate`", len(pending), strings.Join(pending, ", "))
	}
	return nil
}
