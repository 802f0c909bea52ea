package smtpserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// backend is a Session store as inbound and submission have one: Data goes
// through ReadMessage and keeps what it returns.
type backend struct {
	mu       sync.Mutex
	messages [][]byte
	dataErrs chan error // every error Data saw, for the tests that wait on it
	store    func() error
	auth     bool // offer AUTH PLAIN
	// refuseRcpt refuses every RCPT TO, counting it with Refuse, and says
	// the count in the reply.
	refuseRcpt bool
}

func newBackend() *backend { return &backend{dataErrs: make(chan error, 16)} }

func (b *backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	if b.auth {
		return &authSession{session{b, c}}, nil
	}
	return &session{b, c}, nil
}

func (b *backend) delivered() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.messages...)
}

type session struct {
	b    *backend
	conn *smtp.Conn
}

func (s *session) Mail(string, *smtp.MailOptions) error { return nil }
func (s *session) Reset()                               {}
func (s *session) Logout() error                        { return nil }

func (s *session) Rcpt(string, *smtp.RcptOptions) error {
	if !s.b.refuseRcpt {
		return nil
	}
	Refuse(s.conn)
	return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: fmt.Sprintf("refusal %d", Refusals(s.conn))}
}

func (s *session) Data(r io.Reader) error {
	msg, err := ReadMessage(r)
	if err != nil {
		s.b.dataErrs <- err
		return err
	}
	if s.b.store != nil {
		if err := s.b.store(); err != nil {
			return err
		}
	}
	s.b.mu.Lock()
	s.b.messages = append(s.b.messages, msg)
	s.b.mu.Unlock()
	return nil
}

type authSession struct{ session }

func (s *authSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *authSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(string, string, string) error { return nil }), nil
}

// start serves a new Server on a loopback port and closes it at the end.
func start(t *testing.T, cfg Config, b *backend) (*Server, string) {
	t.Helper()
	s := build(t, cfg, b)
	return s, serve(t, s)
}

// build makes a Server with the tests' defaults, for a test to adjust
// before serve.
func build(t *testing.T, cfg Config, b *backend) *Server {
	t.Helper()
	if cfg.Hostname == "" {
		cfg.Hostname = "mx.mailyard.test"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve serves s on a loopback port and closes it at the end.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// client is a raw SMTP client for what well-behaved clients never send.
type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	return dialFrom(t, addr, "")
}

// dialFrom is dial from the local address ip (any of 127.0.0.0/8 is this
// machine's; "": the system's choice).
func dialFrom(t *testing.T, addr, ip string) *client {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if ip != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	return &client{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatal(err)
	}
}

// reply reads one reply, all of its lines, as "CODE text" of the last line
// plus the texts of all lines.
func (c *client) reply() (string, []string) {
	c.t.Helper()
	var lines []string
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			c.t.Fatalf("reading reply (after %q): %v", lines, err)
		}
		line = strings.TrimRight(line, "\r\n")
		if len(line) < 4 {
			c.t.Fatalf("short reply line %q", line)
		}
		lines = append(lines, line[4:])
		if line[3] == ' ' {
			return line, lines
		}
	}
}

// expect reads one reply and fails unless it starts with prefix.
func (c *client) expect(prefix string) string {
	c.t.Helper()
	last, _ := c.reply()
	if !strings.HasPrefix(last, prefix) {
		c.t.Fatalf("got reply %q, want %q", last, prefix)
	}
	return last
}

// closed fails unless the server closes the connection within d.
func (c *client) closed(d time.Duration) {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(d))
	rest, err := io.ReadAll(c.r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("connection still open after %v (read %q)", d, rest)
	}
}

// transaction greets and opens a message up to DATA's 354.
func (c *client) transaction() {
	c.t.Helper()
	c.expect("220 ")
	c.send("EHLO client.test\r\n")
	c.expect("250 ")
	c.send("MAIL FROM:<a@client.test>\r\n")
	c.expect("250 ")
	c.send("RCPT TO:<b@mx.mailyard.test>\r\n")
	c.expect("250 ")
	c.send("DATA\r\n")
	c.expect("354 ")
}

// message is a clean message of exactly n bytes, CRLF lines of 78 bytes.
func message(n int) []byte {
	var b bytes.Buffer
	b.WriteString("Subject: size\r\n\r\n")
	line := strings.Repeat("x", 76) + "\r\n"
	for b.Len()+len(line) <= n {
		b.WriteString(line)
	}
	if rest := n - b.Len(); rest > 0 {
		if rest >= 2 {
			b.WriteString(strings.Repeat("y", rest-2) + "\r\n")
		} else { // one byte: lengthen the last line
			b.Truncate(b.Len() - 2)
			b.WriteString("x\r\n")
		}
	}
	return b.Bytes()
}
