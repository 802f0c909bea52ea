//go:build !race

package worker

// deadlockDetectionTimeout is the SDK's default (one second) in a normal
// build; see deadlock_race.go for the build with the race detector.
const deadlockDetectionTimeout = 0
