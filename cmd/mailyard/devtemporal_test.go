package main

import "testing"

// mailyard dev starts the Temporal dev server at the port of TEMPORAL_ADDRESS
// (an IPv6 one too) and refuses an address that is not this machine's,
// whose server its clients would dial instead of the one it starts.
func TestDevTemporalPort(t *testing.T) {
	for addr, want := range map[string]int{"127.0.0.1:7233": 7233, "localhost:7300": 7300, "[::1]:7400": 7400} {
		if got, err := devTemporalPort(addr); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", addr, got, err, want)
		}
	}
	for _, addr := range []string{"temporal:7233", "10.0.0.5:7233", "127.0.0.1", "127.0.0.1:99999", "[::1]"} {
		if _, err := devTemporalPort(addr); err == nil {
			t.Errorf("%s accepted", addr)
		}
	}
}
