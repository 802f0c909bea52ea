//go:build mailyard_testhooks

package main

import (
	"fmt"
	"os"
	"strings"
	"time"
	_ "unsafe" // go:linkname

	// The package that holds the setter below; the worker links it anyway.
	_ "go.temporal.io/sdk/worker"
)

// This file is built only into the binary the tests run (internal/testenv
// builds it with -tags mailyard_testhooks); `make build` and the Dockerfile
// leave it out, so nothing here is in what ships.

// setRetryLongPollGracePeriod is the Temporal Go SDK's setter, made for its own
// tests, of how long a worker's pollers keep retrying an error they cannot
// recover from (NamespaceNotFound, say) before the SDK calls it fatal: two
// minutes, with no worker or client option to change it. The name is checked
// when the test binary links, so an SDK without it fails the build, not a test.
//
//go:linkname setRetryLongPollGracePeriod go.temporal.io/sdk/internal.SetRetryLongPollGracePeriod
func setRetryLongPollGracePeriod(time.Duration)

// testPollGraceEnv sets that grace period in a process the tests start, before
// any worker exists (the SDK's condition for calling the setter); the fatal
// worker test (worker_fatal_test.go) sets it to seconds instead of waiting two
// minutes for the same path through the SDK and worker.Run.
const testPollGraceEnv = "MAILYARD_TEST_POLL_GRACE"

// testEmailScheduleEnv replaces the email retry schedule of the API a test
// starts (comma-separated waits, e.g. "0s,2s,2s"): the end-to-end test of a
// 451 retried on the schedule's second step waits seconds, not the minute
// of the default schedule, which the workflow's own tests cover.
const testEmailScheduleEnv = "MAILYARD_TEST_EMAIL_SCHEDULE"

func init() {
	if v := os.Getenv(testPollGraceEnv); v != "" {
		setRetryLongPollGracePeriod(positiveDuration(testPollGraceEnv, v))
	}
	if v := os.Getenv(testEmailScheduleEnv); v != "" {
		for _, wait := range strings.Split(v, ",") {
			d := time.Duration(0)
			if wait != "0s" && wait != "0" {
				d = positiveDuration(testEmailScheduleEnv, wait)
			}
			testEmailSchedule = append(testEmailSchedule, d)
		}
	}
}

// positiveDuration parses a hook's duration, or ends the process: a test
// that mistypes one learns it at once.
func positiveDuration(env, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		fmt.Fprintf(os.Stderr, "%s=%q: not a positive duration\n", env, v)
		os.Exit(2)
	}
	return d
}
