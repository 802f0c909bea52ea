package testenv

import (
	"net"
	"sync"
	"testing"
)

// SilentServer listens on addr ("127.0.0.1:0" for any port) until the test
// ends, accepts connections and never says anything: a server that hangs
// (an SMTP exchanger that never greets, a Temporal that never answers).
// hangup makes it close each connection at once instead. It returns its
// address and how many connections it has accepted.
func SilentServer(t testing.TB, addr string, hangup bool) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	count := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			count++
			if hangup {
				_ = c.Close()
			} else {
				open = append(open, c)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return count
	}
}
