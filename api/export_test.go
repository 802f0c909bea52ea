package api

import (
	"testing"
	"time"
)

// ShortenLifecycleBudgets makes Rotate and Verify stop waiting for their
// workflows after d, until the test ends.
func ShortenLifecycleBudgets(t testing.TB, d time.Duration) {
	rotate, verify := rotateBudget, verifyBudget
	rotateBudget, verifyBudget = d, d
	t.Cleanup(func() { rotateBudget, verifyBudget = rotate, verify })
}
