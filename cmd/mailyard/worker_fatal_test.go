package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/temporaldev"
	"github.com/mailyard/mailyard/internal/testenv"
)

// A worker whose namespace is deleted under it exits with a non-zero status
// (so its supervisor restarts it and someone notices) instead of running on
// without polling. The SDK calls NamespaceNotFound fatal once its pollers have
// retried it for a grace period: two minutes in what ships, which no worker or
// client option changes. The binary the tests run has a hook
// (testhooks.go, MAILYARD_TEST_POLL_GRACE) that sets the SDK's own setter for
// that period, so the same path (SDK poller, OnFatalError, worker.Run, the exit
// status) runs here after 5 seconds instead of 2 minutes.
func TestWorkerExitsOnFatalError(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own Temporal dev server and the worker binary")
	}
	t.Parallel()
	// Long polls end after 5 s instead of a minute: the one under way when
	// the namespace goes would otherwise hold off the first NamespaceNotFound
	// for up to that minute.
	srv, err := temporaldev.Start(context.Background(), temporaldev.Options{Headless: true,
		DynamicConfig: []string{`matching.longPollExpirationInterval="5s"`}})
	if err != nil {
		t.Fatalf("Temporal dev server: %v", err)
	}
	t.Cleanup(srv.Stop)
	temporal := srv.Address
	cli, err := temporaldev.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	const namespace = "mailyard-doomed"
	const pollGrace = 5 * time.Second
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
		"MAILYARD_TEST_POLL_GRACE=" + pollGrace.String(),
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
	// The grace period counts from the pollers' last successful poll; after
	// it, at most their longest back-off (10 s), or a long poll that was under
	// way when the namespace went (5 s here). With the SDK's own two minutes
	// the worker, started seconds before the deletion, would exit about two
	// minutes after it: past this deadline, so a hook that stopped working
	// fails the test instead of slowing it down.
	const exitWithin = 90 * time.Second
	deleted := time.Now()
	for !worker.Exited() {
		if time.Since(deleted) > exitWithin {
			t.Fatalf("the worker still runs %s after its namespace was deleted:\n%s", exitWithin, worker.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the worker exited %s after its namespace was deleted", time.Since(deleted).Round(time.Second))
	if code := worker.ExitCode(); code == 0 || !strings.Contains(worker.Output(), "worker stopped on a fatal error") {
		t.Fatalf("exit status %d, output:\n%s", worker.ExitCode(), worker.Output())
	}
}
