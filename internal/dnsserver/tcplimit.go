package dnsserver

import (
	"net"
	"net/netip"
	"sync"
)

// TCP answers are never rate limited (a resolver sent there by a truncated
// answer must get its answer), so TCP connections are capped instead: a
// client holding thousands of them open (a query every few seconds keeps
// one alive for minutes) would otherwise take the process's goroutines and
// file descriptors, and at the descriptor limit miekg/dns retries Accept in
// a tight loop. Past maxTCPConnections the listener stops accepting until
// one closes (new connections wait in the kernel's queue); a client address
// (IPv4, or IPv6 /56, as the UDP rate limit counts) past
// maxTCPConnectionsPerClient has the new one closed at once. Loopback is not
// counted per address.
const (
	maxTCPConnections          = 512
	maxTCPConnectionsPerClient = 16
)

// tcpLimiter is a listener that enforces the caps above.
type tcpLimiter struct {
	net.Listener
	// counted says whether a client address has the per-client cap
	// (loopback has not; tests count it).
	counted func(netip.Addr) bool

	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once

	mu        sync.Mutex
	perClient map[netip.Prefix]int
}

func limitTCP(l net.Listener) *tcpLimiter {
	return &tcpLimiter{
		Listener: l, counted: func(a netip.Addr) bool { return !a.IsLoopback() },
		slots: make(chan struct{}, maxTCPConnections), closed: make(chan struct{}),
		perClient: map[netip.Prefix]int{},
	}
}

func (l *tcpLimiter) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		client, counted := l.client(c.RemoteAddr())
		if counted {
			l.mu.Lock()
			full := l.perClient[client] >= maxTCPConnectionsPerClient
			if !full {
				l.perClient[client]++
			}
			l.mu.Unlock()
			if full {
				c.Close()
				<-l.slots
				continue
			}
		}
		return &limitedConn{Conn: c, release: func() { l.release(client, counted) }}, nil
	}
}

func (l *tcpLimiter) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// client is the address a connection counts against, and whether it does.
func (l *tcpLimiter) client(addr net.Addr) (netip.Prefix, bool) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}, false
	}
	ip := tcp.AddrPort().Addr().Unmap()
	if !l.counted(ip) {
		return netip.Prefix{}, false
	}
	bits := 56
	if ip.Is4() {
		bits = 32
	}
	prefix, _ := ip.Prefix(bits)
	return prefix, true
}

func (l *tcpLimiter) release(client netip.Prefix, counted bool) {
	if counted {
		l.mu.Lock()
		if l.perClient[client]--; l.perClient[client] <= 0 {
			delete(l.perClient, client)
		}
		l.mu.Unlock()
	}
	<-l.slots
}

// limitedConn gives its slot back once, when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
