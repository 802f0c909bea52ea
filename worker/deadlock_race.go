//go:build race

package worker

import "time"

// deadlockDetectionTimeout, in a build with the race detector (the tests'
// processes), gives a workflow task ten times the SDK's one second before
// the SDK calls it deadlocked: the detector slows code by 2–20×, and on a
// loaded 2-core machine a task that logs can wait longer than a second for
// the log's lock. The SDK's own handling of a deadlocked task then races
// with the task it abandons, which the race detector reports and which
// fails the process.
const deadlockDetectionTimeout = 10 * time.Second
