package smtpserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/config"
)

// A client that keeps talking does not keep its connection: once the
// session's time is up, its next wait for a command ends with 421, however
// busy it was.
func TestMaxSessionTimeEndsABusySession(t *testing.T) {
	_, addr := start(t, Config{MaxSessionTime: 300 * time.Millisecond}, newBackend())
	c := dial(t, addr)
	c.expect("220 ")
	// Far more NOOPs than fit in the session, each well within the idle
	// time-out: only the session's end can stop them.
	for range 1000 {
		c.send("NOOP\r\n")
		last, _ := c.reply()
		if strings.HasPrefix(last, "421 4.4.2 ") {
			c.closed(5 * time.Second)
			return
		}
		if !strings.HasPrefix(last, "250 ") {
			t.Fatalf("NOOP: %q", last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("1000 NOOPs over 10 s and the session did not end")
}

// A DATA that trickles one short line at a time is cut at the end of the
// session's grace, and nothing of it is stored; also when the message has
// a bare line ending before (it is read on to its end, without keeping it,
// and the time-out is still the temporary 451, not net's error text as a
// permanent 554 naming the server's socket).
func TestMaxSessionTimeCutsATricklingMessage(t *testing.T) {
	for _, first := range []string{"x\r\n", "bare\n"} {
		t.Run(strings.TrimSpace(first), func(t *testing.T) { cutTrickle(t, first) })
	}
}

func cutTrickle(t *testing.T, first string) {
	b := newBackend()
	// Time enough for the commands up to DATA, whatever the machine's load.
	_, addr := start(t, Config{MaxSessionTime: 2 * time.Second}, b)
	c := dial(t, addr)
	c.transaction()
	if _, err := c.conn.Write([]byte(first)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				if _, err := c.conn.Write([]byte("x\r\n")); err != nil {
					return
				}
			}
		}
	}()
	c.expect("451 4.4.2 ") // ErrMessageTimeout: the client sends it again later
	c.expect("421 4.4.2 ")
	c.closed(5 * time.Second)
	if err := <-b.dataErrs; err == nil {
		t.Fatal("Data saw no error")
	}
	if got := b.delivered(); len(got) != 0 {
		t.Fatalf("delivered %q", got)
	}
}

// A message under way when the session ends is finished in the grace and
// answered; the next command gets 421.
func TestMaxSessionTimeLetsAMessageFinish(t *testing.T) {
	b := newBackend()
	s := build(t, Config{MaxSessionTime: 2 * time.Second}, b)
	s.grace = time.Minute
	addr := serve(t, s)
	c := dial(t, addr)
	c.transaction()
	c.send("Subject: x\r\n\r\nfirst half\r\n")
	// A connection accepted after c that waits: its 421 shows that c's
	// session is over too.
	probe := dial(t, addr)
	probe.expect("220 ")
	probe.expect("421 4.4.2 ")
	c.send("second half\r\n.\r\n")
	c.expect("250 ")
	c.send("NOOP\r\n")
	c.expect("421 4.4.2 ")
	c.closed(5 * time.Second)
	if got := b.delivered(); len(got) != 1 || string(got[0]) != "Subject: x\r\n\r\nfirst half\r\nsecond half\r\n" {
		t.Fatalf("delivered %q", got)
	}
}

func TestConnectionLimitPerIP(t *testing.T) {
	s := build(t, Config{MaxConnections: 10, MaxConnectionsPerIP: 2}, newBackend())
	s.capLoopback = true
	addr := serve(t, s)
	held := []*client{dial(t, addr), dial(t, addr)}
	for _, c := range held {
		c.expect("220 ")
	}
	c := dial(t, addr)
	c.expect("421 4.7.0 mx.mailyard.test Too many connections from your address, try again later")
	c.closed(2 * time.Second)
	// The refused connection gave its process-wide slot back.
	eventually(t, func() bool { return len(s.slots) == 2 })

	held[0].send("QUIT\r\n")
	held[0].expect("221 ")
	eventually(t, func() bool {
		c := dial(t, addr)
		last, _ := c.reply()
		return strings.HasPrefix(last, "220 ")
	})
}

// Loopback is not capped per address: a local proxy's clients all come
// from it. The default share is a tenth of MaxConnections.
func TestConnectionLimitPerIPSparesLoopback(t *testing.T) {
	s, addr := start(t, Config{MaxConnections: 20}, newBackend())
	if s.perIP != 2 {
		t.Fatalf("default per address %d, want 2", s.perIP)
	}
	for range 5 {
		dial(t, addr).expect("220 ")
	}
}

// Config.MessageRate counts the MAIL FROM of each client address, over all
// its connections; one past the bucket gets 421 and the connection is
// closed, while another address still sends. Loopback is not limited.
func TestMessageRatePerClient(t *testing.T) {
	rate := config.RateLimit{Requests: 1, Per: time.Hour} // a burst of 2
	s := build(t, Config{MessageRate: rate}, newBackend())
	s.capLoopback = true
	addr := serve(t, s)
	mail := func(c *client, want string) {
		t.Helper()
		c.send("MAIL FROM:<a@client.test>\r\n")
		c.expect(want)
		c.send("RSET\r\n")
		if strings.HasPrefix(want, "250") {
			c.expect("250 ")
		}
	}
	greet := func(c *client) *client {
		c.expect("220 ")
		c.send("EHLO client.test\r\n")
		c.expect("250 ")
		return c
	}
	first := greet(dialFrom(t, addr, "127.0.0.2"))
	mail(first, "250 ")
	mail(greet(dialFrom(t, addr, "127.0.0.2")), "250 ")
	mail(first, "421 4.7.0 Too much mail from your address, try again later")
	first.closed(2 * time.Second)
	mail(greet(dialFrom(t, addr, "127.0.0.3")), "250 ")

	_, local := start(t, Config{MessageRate: rate}, newBackend())
	c := greet(dial(t, local))
	for range 5 {
		mail(c, "250 ")
	}
}

func TestClientKey(t *testing.T) {
	s := &Server{}
	for addr, want := range map[net.Addr]string{
		&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 25}:                       "192.0.2.1",
		&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 25}:                "192.0.2.1",
		&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 25}:            "2001:db8:1:2::/64",
		&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff:ffff:ffff:ffff"), Port: 1}: "2001:db8:1:2::/64",
		&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 25}:                 "2001:db8:1:3::/64",
		&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 25}:                       "",
		&net.TCPAddr{IP: net.ParseIP("::1"), Port: 25}:                             "",
		&net.UnixAddr{Name: "/run/smtp.sock", Net: "unix"}:                         "",
	} {
		if got := s.clientKey(addr); got != want {
			t.Errorf("clientKey(%v) = %q, want %q", addr, got, want)
		}
	}
}

// Shutdown answers connections waiting for a command 421 at once, rather
// than waiting for them to QUIT, and returns nil long before its deadline.
func TestShutdownAnswersIdleConnections(t *testing.T) {
	s, addr := start(t, Config{}, newBackend())
	idle := dial(t, addr)
	idle.expect("220 ")
	mid := dial(t, addr) // between two commands of a transaction
	mid.expect("220 ")
	mid.send("EHLO client.test\r\nMAIL FROM:<a@client.test>\r\n")
	mid.expect("250 ")
	mid.expect("250 ")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("Shutdown: %v (context: %v)", err, ctx.Err())
	}
	for _, c := range []*client{idle, mid} {
		c.expect("421 4.4.2 ")
		c.closed(2 * time.Second)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after Shutdown: %v", err)
	}
}

// A message being received when Shutdown begins is finished and answered
// 250; then the connection gets 421.
func TestShutdownFinishesAMessage(t *testing.T) {
	b := newBackend()
	s, addr := start(t, Config{}, b)
	c := dial(t, addr)
	c.transaction()
	c.send("Subject: x\r\n\r\nfirst half\r\n")
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.draining
	})
	c.send("second half\r\n.\r\n")
	c.expect("250 ")
	c.expect("421 4.4.2 ")
	c.closed(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := b.delivered(); len(got) != 1 || string(got[0]) != "Subject: x\r\n\r\nfirst half\r\nsecond half\r\n" {
		t.Fatalf("delivered %q", got)
	}
}

// A message that stalls past Shutdown's deadline is cut; that is still an
// ordinary stop, not an error.
func TestShutdownDeadlineClosesAStalledMessage(t *testing.T) {
	b := newBackend()
	s, addr := start(t, Config{}, b)
	c := dial(t, addr)
	c.transaction()
	c.send("Subject: x\r\n\r\nstalled")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	c.closed(5 * time.Second)
	if got := b.delivered(); len(got) != 0 {
		t.Fatalf("delivered %q", got)
	}
}

// Under STARTTLS the 421 of a shutdown goes out through TLS.
func TestShutdownAnswersUnderTLS(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, t.TempDir(), 5)
	s, addr := start(t, Config{TLSCertFile: certFile, TLSKeyFile: keyFile}, newBackend())
	c := dial(t, addr)
	c.expect("220 ")
	c.send("EHLO client.test\r\n")
	c.expect("250 ")
	c = c.startTLS(ca)
	c.send("EHLO client.test\r\n")
	c.expect("250 ")
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.expect("421 4.4.2 ")
	c.closed(2 * time.Second)
}

// Refusals belong to the connection: STARTTLS ends go-smtp's session and
// starts another, and the count goes on (inbound closes a connection after
// 10 refused recipients, and STARTTLS must not give 10 more).
func TestRefusalsOutliveSTARTTLS(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, t.TempDir(), 6)
	b := newBackend()
	b.refuseRcpt = true
	_, addr := start(t, Config{TLSCertFile: certFile, TLSKeyFile: keyFile}, b)
	c := dial(t, addr)
	c.expect("220 ")
	c.send("EHLO client.test\r\nMAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\nRSET\r\n")
	c.expect("250 ")
	c.expect("250 ")
	c.expect("550 5.1.1 refusal 1")
	c.expect("250 ")
	c = c.startTLS(ca)
	c.send("EHLO client.test\r\nMAIL FROM:<a@client.test>\r\nRCPT TO:<b@mx.mailyard.test>\r\n")
	c.expect("250 ")
	c.expect("250 ")
	c.expect("550 5.1.1 refusal 2")
}

// startTLS sends STARTTLS, completes the handshake and returns the client
// that speaks through TLS.
func (c *client) startTLS(ca *testCA) *client {
	c.t.Helper()
	c.send("STARTTLS\r\n")
	c.expect("220 ")
	tc := tls.Client(c.conn, ca.clientConfig())
	if err := tc.Handshake(); err != nil {
		c.t.Fatal(err)
	}
	return &client{t: c.t, conn: tc, r: bufio.NewReader(tc)}
}
