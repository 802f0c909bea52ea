package smtpsend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/mailyard/mailyard/internal/egress"
)

// server is one SMTP server to try.
type server struct {
	host  string // its name: TLS server name, and for messages
	addr  string // what to dial: ip:port in mx mode, the relay's host:port
	where string // how messages name it
	// more says another address is tried if this one fails (mx mode).
	more bool
}

// session is an SMTP connection ready for a mail transaction: greeted,
// encrypted when it could or had to be, authenticated when configured.
type session struct {
	client      *smtp.Client
	conn        net.Conn // what client reads and writes, for deadlines
	where       string
	dataTimeout time.Duration
	stop        func() bool // undoes the close-on-cancel
}

// stepError is a failure to set up a session, with the step it happened at.
type stepError struct {
	step string
	err  error
	// tlsFailed: the TLS handshake failed, after which opportunistic mx
	// delivery tries the same server again in clear.
	tlsFailed bool
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// sessionOutcome is the outcome for all recipients when no session could be
// set up with srv. It is never final: the next attempt may find the server
// (or another exchanger) in better shape, even after a 5xx greeting.
func sessionOutcome(ctx context.Context, srv server, err error) outcome {
	step := "connect"
	var se *stepError
	if errors.As(err, &se) {
		step, err = se.step, se.err
	}
	if code, text, ok := serverReply(err); ok {
		return outcome{status: Deferred, code: code, message: fmt.Sprintf("%s: %s: %d %s", srv.where, step, code, text)}
	}
	if errors.Is(err, egress.ErrBlockedAddress) {
		// The exchanger by name only: its address is what the name
		// resolves to inside Mailyard's network, which the customer who
		// chose the MX record must not learn from the deferral.
		return deferred("%s: %s: refused: %v (private networks are not allowed for MX delivery)", srv.host, step, egress.ErrBlockedAddress)
	}
	return deferred("%s", describe(ctx, srv.where, step, err))
}

// open connects to srv and sets up a session. useSTARTTLS false skips
// STARTTLS even when offered (the retry after a failed handshake).
func (s *Sender) open(ctx context.Context, srv server, useSTARTTLS bool) (*session, error) {
	dialer := net.Dialer{Timeout: s.cfg.DialTimeout}
	if s.cfg.Mode == ModeMX && !s.cfg.AllowPrivateNetworks {
		dialer.Control = egress.GuardDial
	}
	raw, err := dialer.DialContext(ctx, "tcp", srv.addr)
	if err != nil {
		return nil, &stepError{step: "connect", err: err}
	}
	// Nothing below takes a context: closing the connection is what ends
	// a command waiting on a server when the attempt runs out of time.
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	sess, err := s.setUp(ctx, capReplies(raw), srv, useSTARTTLS)
	if err != nil {
		stop()
		_ = raw.Close()
		return nil, err
	}
	sess.where = srv.where
	sess.dataTimeout = s.cfg.DataTimeout
	sess.stop = stop
	return sess, nil
}

// setUpWait is how long each reply before the mail transaction (the
// greeting, EHLO's and STARTTLS's) may take: the command time-out, but at
// most half the attempt's time left when another address follows, so that
// an exchanger that accepts connections and never answers leaves time for
// the next one.
func (s *Sender) setUpWait(ctx context.Context, srv server) time.Duration {
	wait := s.cfg.CommandTimeout
	if deadline, ok := ctx.Deadline(); ok && srv.more {
		wait = min(wait, time.Until(deadline)/2)
	}
	return wait
}

func (s *Sender) setUp(ctx context.Context, raw *repliesCapped, srv server, useSTARTTLS bool) (*session, error) {
	if s.cfg.Mode == ModeRelay && s.cfg.RelayImplicitTLS {
		tlsConn := tls.Client(raw.Conn, s.tlsConfig(srv.host))
		if err := s.handshakeTLS(ctx, tlsConn); err != nil {
			return nil, &stepError{step: "TLS handshake", err: err}
		}
		conn := capReplies(tlsConn)
		return s.hello(smtp.NewClient(conn), conn, raw, true)
	}

	// The dialogue up to TLS is ours: go-smtp would send its STARTTLS
	// after an "EHLO localhost" whose name it does not let us choose (by
	// design: a name sent before TLS cannot be trusted), and servers that
	// check that name refuse the mail. go-smtp takes over after it.
	text := textproto.NewConn(raw)
	// Each reply gets a time-out of its own (docs/sending.md).
	wait := s.setUpWait(ctx, srv)
	replyWithin := func() { _ = raw.SetDeadline(time.Now().Add(wait)) }
	replyWithin()
	if _, _, err := text.ReadResponse(220); err != nil {
		return nil, &stepError{step: "greeting", err: err}
	}
	replyWithin()
	extensions, err := ehlo(text, s.cfg.HELO)
	if err != nil {
		return nil, &stepError{step: "EHLO", err: err}
	}
	_, offered := extensions["STARTTLS"]
	if !offered && s.cfg.TLS == TLSRequired {
		quitText(text)
		return nil, &stepError{step: "STARTTLS", err: errors.New("the server does not offer STARTTLS and TLS is required")}
	}
	if offered && useSTARTTLS {
		replyWithin()
		if err := text.PrintfLine("STARTTLS"); err != nil {
			return nil, &stepError{step: "STARTTLS", err: err}
		}
		if _, _, err := text.ReadResponse(220); err == nil {
			return s.startTLS(ctx, raw, text, srv)
		} else if s.cfg.TLS == TLSRequired {
			return nil, &stepError{step: "STARTTLS", err: err}
		}
		// Refused (e.g. 454): the session goes on in clear.
	}
	_ = raw.SetDeadline(time.Time{})
	conn := resume(raw, text.R)
	return s.hello(smtp.NewClient(conn), conn, raw, false)
}

func (s *Sender) startTLS(ctx context.Context, raw *repliesCapped, text *textproto.Conn, srv server) (*session, error) {
	if text.R.Buffered() > 0 {
		// Bytes that arrived before the handshake were not protected by
		// it; taking them as replies would let an attacker inject them.
		return nil, &stepError{step: "STARTTLS", err: errors.New("the server sent data ahead of the TLS handshake")}
	}
	// The handshake has a time-out of its own, not what is left of the
	// one set for the commands before it.
	_ = raw.SetDeadline(time.Time{})
	tlsConn := tls.Client(raw.Conn, s.tlsConfig(srv.host))
	if err := s.handshakeTLS(ctx, tlsConn); err != nil {
		return nil, &stepError{step: "TLS handshake", err: err, tlsFailed: true}
	}
	capped := capReplies(tlsConn)
	conn := resume(capped, capped)
	return s.hello(smtp.NewClient(conn), conn, raw, true)
}

func (s *Sender) handshakeTLS(ctx context.Context, conn *tls.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CommandTimeout)
	defer cancel()
	return conn.HandshakeContext(ctx)
}

// tlsConfig is for the server named host.
func (s *Sender) tlsConfig(host string) *tls.Config {
	if s.cfg.Mode == ModeRelay {
		return &tls.Config{ServerName: host, RootCAs: s.cfg.RootCAs, MinVersion: tls.VersionTLS12}
	}
	// Mail exchangers' names come from DNS that nothing authenticates, and
	// many present certificates that would not verify: checking them would
	// only hold mail back, or send it in clear. Encrypting without
	// verifying still defeats passive eavesdropping (opportunistic
	// security, RFC 7435), as MTAs do by default; authenticating an
	// exchanger takes MTA-STS or DANE.
	return &tls.Config{ServerName: host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // see above
}

// hello has go-smtp introduce us (again after TLS, RFC 3207 §4.2) and
// authenticate with the relay when configured.
func (s *Sender) hello(client *smtp.Client, conn, raw net.Conn, encrypted bool) (*session, error) {
	client.CommandTimeout = s.cfg.CommandTimeout
	client.SubmissionTimeout = s.cfg.DataTimeout
	if err := client.Hello(s.cfg.HELO); err != nil {
		return nil, &stepError{step: "EHLO", err: err}
	}
	if s.cfg.Mode == ModeRelay && s.cfg.RelayUsername != "" {
		if !encrypted && !isLoopback(raw.RemoteAddr()) {
			return nil, &stepError{step: "AUTH", err: errors.New("not sending the relay credentials over an unencrypted connection (the relay offered no STARTTLS)")}
		}
		if !client.SupportsAuth("PLAIN") {
			_, mechanisms := client.Extension("AUTH")
			return nil, &stepError{step: "AUTH", err: fmt.Errorf("the relay does not offer AUTH PLAIN (it offers %q)", mechanisms)}
		}
		if err := client.Auth(sasl.NewPlainClient("", s.cfg.RelayUsername, s.cfg.RelayPassword)); err != nil {
			return nil, &stepError{step: "AUTH", err: err}
		}
	}
	return &session{client: client, conn: conn}, nil
}

// ehlo sends EHLO and returns the extensions the server lists, by upper-case
// keyword. A server that does not know EHLO lists none; go-smtp falls back
// to HELO with it.
func ehlo(text *textproto.Conn, name string) (map[string]string, error) {
	if err := text.PrintfLine("EHLO %s", name); err != nil {
		return nil, err
	}
	_, msg, err := text.ReadResponse(250)
	var protoErr *textproto.Error
	if errors.As(err, &protoErr) && (protoErr.Code == 500 || protoErr.Code == 502) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	extensions := map[string]string{}
	lines := strings.Split(msg, "\n")
	for _, line := range lines[1:] { // the first line is the server's greeting
		keyword, params, _ := strings.Cut(line, " ")
		extensions[strings.ToUpper(keyword)] = params
	}
	return extensions, nil
}

// quitText ends a session politely; the reply does not matter.
func quitText(text *textproto.Conn) {
	if text.PrintfLine("QUIT") == nil {
		_, _, _ = text.ReadResponse(221)
	}
}

// resume hands go-smtp a connection we have already read from. go-smtp
// starts by reading the server's greeting, which we consumed: it gets a
// stand-in, then the rest of the stream from r.
func resume(conn net.Conn, r io.Reader) net.Conn {
	return &resumedConn{Conn: conn, r: io.MultiReader(strings.NewReader("220 greeting already read\r\n"), r)}
}

type resumedConn struct {
	net.Conn
	r io.Reader
}

func (c *resumedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// maxReplyBytes bounds what a server may send in answer to one command (or
// as its greeting): the longest line go-smtp takes is 2,000 bytes, but
// neither it nor net/textproto, which reads the dialogue before TLS, bounds
// a reply's number of lines, nor textproto a line's length. An exchanger
// is chosen by whoever controls the recipient's domain, and one that
// streamed a reply without end would fill the worker's memory. A real
// reply, EHLO's list of extensions included, is a few hundred bytes.
const maxReplyBytes = 64 << 10

// errReplyTooLong ends a session whose server sent more than maxReplyBytes
// in answer to one command.
var errReplyTooLong = fmt.Errorf("the server's reply is longer than %d KiB", maxReplyBytes>>10)

// repliesCapped is a connection whose reads fail once more than
// maxReplyBytes have arrived since our last write: each command we send
// (or the message) opens the budget of its reply. Below TLS, the handshake
// is bounded by crypto/tls itself, so it is the unencrypted connection and
// the TLS one that are capped, not the bytes under TLS.
type repliesCapped struct {
	net.Conn
	read int
}

func capReplies(conn net.Conn) *repliesCapped { return &repliesCapped{Conn: conn} }

func (c *repliesCapped) Write(p []byte) (int, error) {
	c.read = 0
	return c.Conn.Write(p)
}

func (c *repliesCapped) Read(p []byte) (int, error) {
	left := maxReplyBytes - c.read
	if left <= 0 {
		return 0, errReplyTooLong
	}
	n, err := c.Conn.Read(p[:min(len(p), left)])
	c.read += n
	return n, err
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
