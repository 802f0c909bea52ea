package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

// A private server keeps its data across Stop and Start, and refuses
// connections in between.
func TestPostgresRestartKeepsData(t *testing.T) {
	pg := StartPostgres(t)
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(pg.URL), pgdriver.WithTimeout(5*time.Second)))
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before')"); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("a stopped server answered")
	}
	pg.Start()
	var v string
	Eventually(t, 30*time.Second, "a query after the restart", func() bool {
		return db.QueryRowContext(ctx, "SELECT v FROM kept").Scan(&v) == nil
	})
	if v != "before" {
		t.Fatalf("read %q after the restart", v)
	}
}
