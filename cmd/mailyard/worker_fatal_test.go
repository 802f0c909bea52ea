package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/temporaldev"
	"github.com/mailyard/mailyard/internal/testenv"
)

// A worker whose namespace is deleted under it exits with a non-zero status
// (so its supervisor restarts it and someone notices) instead of running on
// without polling. The SDK calls the error fatal after two minutes of
// NamespaceNotFound, so this test takes about three; it runs beside the
// package's other tests. The two minutes are the SDK's grace period for
// errors it cannot recover from while long polling (go.temporal.io/sdk
// v1.50.0): no worker or client option sets it, only a setter inside the SDK
// for its own tests, so neither this test nor worker/worker.go can shorten it.
func TestWorkerExitsOnFatalError(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary for about three minutes")
	}
	t.Parallel()
	temporal := testenv.OwnTemporal(t)
	cli, err := temporaldev.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	const namespace = "mailyard-doomed"
	operator := func(args ...string) {
		t.Helper()
		args = append([]string{"operator", "namespace"}, append(args, "--address", temporal, "--namespace", namespace)...)
		if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
			t.Fatalf("temporal %v: %v\n%s", args, err, out)
		}
	}
	operator("create")
	env := []string{
		"MAILYARD_DATABASE_URL=" + testenv.PostgresURL(t),
		"MAILYARD_ENCRYPTION_KEY=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"TEMPORAL_ADDRESS=" + temporal,
		"TEMPORAL_NAMESPACE=" + namespace,
	}
	testenv.Run(t, env, "migrate", "up")
	worker := testenv.Start(t, env, "worker")
	testenv.Eventually(t, 30*time.Second, "the workers to start", func() bool {
		return strings.Count(worker.Output(), "Started Worker") == 3
	})
	time.Sleep(2 * time.Second)
	if worker.Exited() {
		t.Fatalf("the worker exited before its namespace was deleted:\n%s", worker.Output())
	}

	operator("delete", "--yes")
	for deadline := time.Now().Add(5 * time.Minute); !worker.Exited(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker still runs 5 minutes after its namespace was deleted:\n%s", worker.Output())
		}
	}
	if code := worker.ExitCode(); code == 0 || !strings.Contains(worker.Output(), "worker stopped on a fatal error") {
		t.Fatalf("exit status %d, output:\n%s", worker.ExitCode(), worker.Output())
	}
}
