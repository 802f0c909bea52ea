//go:build !race

package testenv

// raceEnabled: see race.go.
const raceEnabled = false
