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
// slots. go-smtp itself has no connection limit: without this, each
// connection costs a goroutine and buffers until the process runs out of
// file descriptors or memory.
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

// Accept never waits for a slot: a connection over the limit is refused on
// the side and the next one is accepted at once.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.s.slots <- struct{}{}:
			return l.s.track(c), nil
		default:
			l.refuse(c)
		}
	}
}

func (l *limitListener) refuse(c net.Conn) {
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
		c.Write([]byte("421 4.7.0 " + l.s.host + " Too many connections, try again later\r\n"))
	}()
}

// limitedConn gives its slot back when closed, and turns go-smtp's read
// deadline, which go-smtp sets only before reading a command, into an idle
// timeout: every read that brings data pushes it on, so a slow but moving
// DATA is not cut while a stalled one is.
type limitedConn struct {
	net.Conn
	s    *Server
	once sync.Once
	// closeAfterWrite closes the connection once the next write is done
	// (CloseAfterReply).
	closeAfterWrite atomic.Bool
}

func (s *Server) track(c net.Conn) *limitedConn {
	lc := &limitedConn{Conn: c, s: s}
	s.mu.Lock()
	s.conns[lc] = struct{}{}
	s.mu.Unlock()
	return lc
}

func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.Conn.SetReadDeadline(time.Now().Add(c.s.idle))
	}
	return n, err
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
// three failed AUTHs) with a 421 the client still reads. go-smtp writes each
// reply in one write, through TLS too.
func CloseAfterReply(c *smtp.Conn) {
	nc := c.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	if lc, ok := nc.(*limitedConn); ok {
		lc.closeAfterWrite.Store(true)
	}
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
		<-c.s.slots
	})
	return err
}
