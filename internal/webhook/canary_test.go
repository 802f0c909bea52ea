package webhook

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// canary is a TCP listener on loopback that must never be reached: it
// counts every connection so a test can assert that a refused destination
// really stayed unconnected.
type canary struct {
	port  int
	conns atomic.Int64
}

func startCanary(t *testing.T) *canary {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &canary{port: ln.Addr().(*net.TCPAddr).Port}
	// Listen on [::1] at the same port too when the machine has IPv6, so
	// that IPv6 loopback spellings would also be caught.
	lns := []net.Listener{ln}
	if ln6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(c.port))); err == nil {
		lns = append(lns, ln6)
	}
	var wg sync.WaitGroup
	for _, l := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				c.conns.Add(1)
				conn.Close()
			}
		}()
	}
	t.Cleanup(func() {
		for _, l := range lns {
			l.Close()
		}
		wg.Wait()
	})
	return c
}

// loopbackOnly is a dial hook placed after the address guard. Whatever
// reaches it got past the guard: it records the address and lets only
// loopback through (where the canary listens), so a failing guard shows up
// as a recorded address and never as traffic beyond this machine.
type loopbackOnly struct {
	mu     sync.Mutex
	passed []string
}

func (l *loopbackOnly) control(_, address string, _ syscall.RawConn) error {
	l.mu.Lock()
	l.passed = append(l.passed, address)
	l.mu.Unlock()
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return errNotLoopback
	}
	return nil
}

func (l *loopbackOnly) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.passed
	l.passed = nil
	return p
}

var errNotLoopback = &net.AddrError{Err: "tests connect to loopback only"}

func withAfterGuard(f func(network, address string, c syscall.RawConn) error) Option {
	return func(c *clientConfig) { c.afterGuard = f }
}
