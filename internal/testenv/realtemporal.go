package testenv

import (
	"context"
	"os"
	"testing"

	"github.com/mailyard/mailyard/internal/temporalserver"
)

// RealTemporal is the real Temporal server (not the dev server) on two
// PostgreSQL databases of this test's own; see internal/temporalserver.
type RealTemporal struct {
	*temporalserver.Server
	// Persistence and Visibility are the postgres:// URLs of the server's two
	// databases, for tests that look at what it writes (internal/e2e/sizing_test.go).
	Persistence, Visibility string
	t                       testing.TB
	output                  *SyncBuffer
}

// StartRealTemporal creates the persistence and visibility databases, loads
// their schemas, starts the server, registers the namespace "default" with
// Mailyard's search attributes (as the dev server has them) and waits until
// workflows can run in it. Everything ends with the test. Without the
// binaries (make temporal-server) the test is skipped, except under CI (CI
// set), where it fails.
func StartRealTemporal(t testing.TB) *RealTemporal {
	t.Helper()
	server, sqlTool, err := temporalserver.FindBinaries()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	r := &RealTemporal{t: t, output: &SyncBuffer{}}
	r.Persistence = createDatabase(t, "temporal_test_").String()
	r.Visibility = createDatabase(t, "temporal_visibility_test_").String()
	r.Server, err = temporalserver.New(context.Background(), temporalserver.Options{
		Server: server, SQLTool: sqlTool,
		Persistence: r.Persistence,
		Visibility:  r.Visibility,
		Dir:         t.TempDir(),
		Output:      r.output,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the databases' cleanups, so it runs before them.
	t.Cleanup(func() {
		r.Server.Stop()
		if t.Failed() {
			t.Logf("end of the Temporal server's output:\n%s", tail(r.output.String(), 16<<10))
		}
	})
	r.Start()
	return r
}

// Start starts the server (again, after Stop) and waits until it is usable.
func (r *RealTemporal) Start() {
	r.t.Helper()
	if err := r.Server.Start(context.Background()); err != nil {
		r.t.Fatal(err) // the server's output follows, from the cleanup
	}
}

// Output is what the server logged so far (warnings and errors).
func (r *RealTemporal) Output() string { return r.output.String() }

// tail is the last n bytes of s: the server logs stack traces with every error.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
