package smtpserver

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
)

// limitListener hands go-smtp only connections that got one of the Server's
// slots and are within their address's share. go-smtp itself has no
// connection limit: without this, each connection costs a goroutine and
// buffers until the process runs out of file descriptors or memory.
type limitListener struct {
	net.Listener
	s *Server
	// say421 is false under implicit TLS, where the client cannot read a
	// plain-text reply.
	say421 bool
}

func (s *Server) limit(ln net.Listener, say421 bool) net.Listener {
	return &limitListener{Listener: ln, s: s, say421: say421}
}

// Replies to a connection refused before its session starts.
const (
	replyTooMany       = "Too many connections, try again later"
	replyTooManyFromIP = "Too many connections from your address, try again later"
)

// Accept never waits for a slot: a connection over a limit is refused on
// the side and the next one is accepted at once.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.s.slots <- struct{}{}:
			if lc := l.s.track(c); lc != nil {
				return lc, nil
			}
			<-l.s.slots
			l.refuse(c, replyTooManyFromIP)
		default:
			l.refuse(c, replyTooMany)
		}
	}
}

func (l *limitListener) refuse(c net.Conn, reply string) {
	if !l.say421 {
		c.Close()
		return
	}
	select {
	case l.s.reject <- struct{}{}:
	default:
		c.Close() // already many 421s in flight: a flood, do not reply
		return
	}
	go func() {
		defer func() { <-l.s.reject }()
		defer c.Close()
		c.SetWriteDeadline(time.Now().Add(rejectWriteTimeout))
		c.Write([]byte("421 4.7.0 " + l.s.host + " " + reply + "\r\n"))
	}()
}

// clientKey is the address a connection counts against for
// Config.MaxConnectionsPerIP: its IPv4 address, or the /64 of its IPv6
// address (one host commonly has a whole /64). It is "" for connections
// that are not capped per address: from loopback (a proxy or application on
// the same machine, whose clients would otherwise all count as one) or
// without an IP address.
func (s *Server) clientKey(addr net.Addr) string {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		host, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return ""
		}
		ip = net.ParseIP(host)
	}
	if ip == nil || (ip.IsLoopback() && !s.capLoopback) {
		return ""
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// past is a deadline that has passed: a read waiting on it ends at once.
var past = time.Unix(1, 0)

// limitedConn gives its slot back when closed and adds three things to
// go-smtp's deadlines, which go-smtp sets before each command line it reads
// and each reply it writes:
//
//   - every read that brings data pushes the read deadline on, which turns
//     it into an idle timeout: a slow but moving DATA is not cut while a
//     stalled one is;
//   - a wait for a command ends at the end of the session
//     (Config.MaxSessionTime), and nothing at all goes on past the end of
//     the session's grace, so that no client, however busy, holds a slot for
//     ever while a message under way at the end still gets time to finish;
//   - once the server drains (Shutdown), a connection waiting for a command
//     times out at once, and go-smtp answers it 421 and closes it.
type limitedConn struct {
	net.Conn
	s   *Server
	key string // clientKey, "" when not capped per address
	// end is the end of the session: the last moment to wait for a
	// command. hardEnd, its grace later, is the last for anything.
	end, hardEnd time.Time
	once         sync.Once
	// closeAfterWrite closes the connection once the next write is done
	// (CloseAfterReply).
	closeAfterWrite atomic.Bool
	// refusals counts what the session refused (Refuse).
	refusals atomic.Int32

	mu sync.Mutex
	// waiting is true from go-smtp setting the read deadline before a
	// command line to the first byte read: the session waits for a command.
	// A session in DATA is not waiting.
	waiting  bool
	draining bool
}

// track makes c a limitedConn, or returns nil when c's address already has
// its share of the connections.
func (s *Server) track(c net.Conn) *limitedConn {
	end := time.Now().Add(s.session)
	lc := &limitedConn{Conn: c, s: s, key: s.clientKey(c.RemoteAddr()), end: end, hardEnd: end.Add(s.grace)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if lc.key != "" {
		if s.clients[lc.key] >= s.perIP {
			return nil
		}
		s.clients[lc.key]++
	}
	lc.draining = s.draining
	s.conns[lc] = struct{}{}
	return lc
}

func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		c.waiting = false
		c.Conn.SetReadDeadline(before(time.Now().Add(c.s.idle), c.hardEnd))
		c.mu.Unlock()
	}
	return n, err
}

// SetReadDeadline is how go-smtp (directly, or through TLS) announces that
// it waits for a command line.
func (c *limitedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting = true
	if c.draining {
		t = past
	}
	return c.Conn.SetReadDeadline(before(t, c.end))
}

// SetWriteDeadline leaves a reply written at the very end
// rejectWriteTimeout to go out: the 421 that tells the client why.
func (c *limitedConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(before(t, c.hardEnd.Add(rejectWriteTimeout)))
}

func (c *limitedConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// before is deadline t, or end if t is later or no deadline.
func before(t, end time.Time) time.Time {
	if t.IsZero() || t.After(end) {
		return end
	}
	return t
}

// drain ends a wait for a command at once; a later one ends as soon as it
// starts (SetReadDeadline). A message being received goes on.
func (c *limitedConn) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draining = true
	if c.waiting {
		c.Conn.SetReadDeadline(past)
	}
}

func (c *limitedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.closeAfterWrite.Load() {
		_ = c.Close()
	}
	return n, err
}

// CloseAfterReply closes a session's connection as soon as the reply being
// prepared has been written: a session ends a connection (submission, after
// three failed AUTHs; inbound, after too many refused recipients) with a 421
// the client still reads. go-smtp writes each reply in one write, through
// TLS too.
func CloseAfterReply(c *smtp.Conn) {
	if lc := limited(c); lc != nil {
		lc.closeAfterWrite.Store(true)
	}
}

// Refusals is how many refusals a session has counted on its connection
// with Refuse. The count belongs to the connection, not the session:
// STARTTLS ends go-smtp's session and starts another on the same
// connection, which must not start from zero.
func Refusals(c *smtp.Conn) int {
	if lc := limited(c); lc != nil {
		return int(lc.refusals.Load())
	}
	return 0
}

// Refuse counts one refusal on c's connection (Refusals).
func Refuse(c *smtp.Conn) {
	if lc := limited(c); lc != nil {
		lc.refusals.Add(1)
	}
}

// limited is the limitedConn under a session's connection, TLS or not (nil
// for a connection the Server did not accept).
func limited(c *smtp.Conn) *limitedConn {
	nc := c.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	lc, _ := nc.(*limitedConn)
	return lc
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		if c.key != "" {
			if c.s.clients[c.key]--; c.s.clients[c.key] == 0 {
				delete(c.s.clients, c.key)
			}
		}
		c.s.mu.Unlock()
		<-c.s.slots
	})
	return err
}
