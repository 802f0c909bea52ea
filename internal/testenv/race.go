//go:build race

package testenv

// raceEnabled: this test binary runs under the race detector, so the mailyard
// processes it starts are built with -race too.
const raceEnabled = true
