package jitter

import (
	"testing"
	"time"
)

func TestSpreadIsDeterministicAndBounded(t *testing.T) {
	const key = "0193a7c0-0000-7000-8000-000000000abc"
	seen := map[time.Duration]bool{}
	for i := range 200 {
		id := key[:len(key)-3] + string(rune('a'+i%26)) + string(rune('a'+i/26))
		d := Spread(time.Hour, id, 2)
		if d != Spread(time.Hour, id, 2) {
			t.Fatal("jitter differs between calls")
		}
		if d < 48*time.Minute || d > 72*time.Minute {
			t.Fatalf("jittered hour %s outside ±20 %%", d)
		}
		seen[d.Truncate(time.Minute)] = true
	}
	if len(seen) < 15 {
		t.Fatalf("jitter hardly spreads: %d distinct minutes", len(seen))
	}
	if Spread(0, key, 1) != 0 {
		t.Fatal("the first attempt is delayed")
	}
}
