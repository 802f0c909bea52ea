// Package smtpserver holds the rules every SMTP listener of Mailyard
// follows (docs/smtp.md), so the bounce host (internal/inbound) and
// submission share one implementation: the message size limit, the idle
// time-out, the connection cap, the extensions, the refusal of bare line
// endings (SMTP smuggling), STARTTLS with certificates re-read when they
// change, and the replies for "try again later". What a server accepts is
// its smtp.Backend's business.
package smtpserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
)

// Defaults of docs/smtp.md.
const (
	DefaultMaxMessageBytes = 10 << 20
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultMaxConnections  = 500
)

// ErrBareLineEnding refuses data with a <CR> or <LF> that is not part of a
// <CRLF> pair: such data could hide an end of data that another server
// reads differently (SMTP smuggling).
var ErrBareLineEnding = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "Bare CR or LF in the message data is not accepted; end lines with CRLF"}

// ErrUnavailable asks the client to try again later, for a session that
// cannot reach the database: the sender keeps the message.
var ErrUnavailable = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Temporary failure, try again later"}

// Config is a listener's configuration; zero fields take the defaults.
type Config struct {
	// Hostname is the name in the greeting and the EHLO answer.
	Hostname        string
	MaxConnections  int
	MaxMessageBytes int64
	IdleTimeout     time.Duration
	// MaxRecipients caps RCPT TO per message (452 4.5.3 beyond); 0: none.
	MaxRecipients int
	// TLSCertFile and TLSKeyFile are PEM files: with them STARTTLS is
	// offered (and ServeTLS works), and they are re-read when they change.
	TLSCertFile, TLSKeyFile string
	// AllowInsecureAuth offers AUTH without TLS (tests, loopback only).
	AllowInsecureAuth bool
	Logger            *slog.Logger
}

// Server is one SMTP server with Mailyard's rules.
type Server struct {
	smtp   *smtp.Server
	cfg    Config
	logger *slog.Logger
	slots  chan struct{}
}

// New builds a server for backend.
func New(cfg Config, backend smtp.Backend) (*Server, error) {
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "localhost"
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := smtp.NewServer(backend)
	s.Domain = cfg.Hostname
	s.MaxMessageBytes = cfg.MaxMessageBytes
	s.MaxRecipients = cfg.MaxRecipients
	s.ReadTimeout, s.WriteTimeout = cfg.IdleTimeout, cfg.IdleTimeout
	s.EnableSMTPUTF8 = true
	s.AllowInsecureAuth = cfg.AllowInsecureAuth
	s.ErrorLog = errorLog{logger}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, errors.New("smtp TLS: set both the certificate and the key, or neither")
	}
	if cfg.TLSCertFile != "" {
		certs, err := newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, logger)
		if err != nil {
			return nil, err
		}
		s.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get}
	}
	return &Server{smtp: s, cfg: cfg, logger: logger, slots: make(chan struct{}, cfg.MaxConnections)}, nil
}

// Serve serves SMTP (with STARTTLS when a certificate is set) on ln until
// Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	return s.serve(&cappedListener{Listener: ln, s: s})
}

// ServeTLS serves SMTP over implicit TLS (the whole connection is TLS) on ln.
func (s *Server) ServeTLS(ln net.Listener) error {
	if s.smtp.TLSConfig == nil {
		return errors.New("implicit TLS needs MAILYARD_SMTP_TLS_CERT and MAILYARD_SMTP_TLS_KEY")
	}
	return s.serve(tls.NewListener(&cappedListener{Listener: ln, s: s}, s.smtp.TLSConfig))
}

func (s *Server) serve(ln net.Listener) error {
	err := s.smtp.Serve(ln)
	if errors.Is(err, smtp.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting and waits for open sessions to end, until ctx
// ends; then it closes them.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.smtp.Shutdown(ctx)
	if errors.Is(err, smtp.ErrServerClosed) {
		return nil
	}
	if err != nil {
		_ = s.smtp.Close()
	}
	return err
}

// Close stops the server and drops open connections.
func (s *Server) Close() error {
	if err := s.smtp.Close(); err != nil && !errors.Is(err, smtp.ErrServerClosed) {
		return err
	}
	return nil
}

// cappedListener hands the SMTP server at most MaxConnections connections
// at a time. One more is answered 421 and closed here, without an SMTP
// session, so a flood costs a write and a close, and the accept loop never
// waits for a slot.
type cappedListener struct {
	net.Listener
	s *Server
}

// rejectWriteTimeout bounds the 421 to a client that does not read.
const rejectWriteTimeout = 2 * time.Second

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.s.slots <- struct{}{}:
			return &slotConn{Conn: c, slots: l.s.slots}, nil
		default:
			go l.s.refuse(c)
		}
	}
}

func (s *Server) refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(rejectWriteTimeout))
	_, _ = fmt.Fprintf(c, "421 4.7.0 %s Too many connections, try again later\r\n", s.cfg.Hostname)
	_ = c.Close()
}

// slotConn frees its slot when it is closed, once (go-smtp may close a
// connection from two goroutines).
type slotConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
	// closeAfterWrite closes the connection once the next write is done.
	closeAfterWrite atomic.Bool
}

func (c *slotConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.closeAfterWrite.Load() {
		_ = c.Close()
	}
	return n, err
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}

// CloseAfterReply closes a session's connection as soon as the reply being
// prepared has been written: a session ends a connection (after three
// failed AUTHs) with a 421 the client still reads. go-smtp writes each
// reply in one write, through TLS too.
func CloseAfterReply(c *smtp.Conn) {
	nc := c.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	if sc, ok := nc.(*slotConn); ok {
		sc.closeAfterWrite.Store(true)
	}
}

// ReadMessage reads a message's data (DATA or BDAT) whole and refuses it
// with ErrBareLineEnding if any <CR> or <LF> is not part of a <CRLF> pair;
// go-smtp's own errors (ErrDataTooLarge, a dropped connection) come back
// as they are, so nothing is stored for them.
func ReadMessage(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if HasBareLineEnding(b) {
		return nil, ErrBareLineEnding
	}
	return b, nil
}

// HasBareLineEnding reports whether b holds a <CR> not followed by <LF> or
// an <LF> not preceded by <CR>.
func HasBareLineEnding(b []byte) bool {
	for i := 0; i < len(b); {
		j := bytes.IndexAny(b[i:], "\r\n")
		if j < 0 {
			return false
		}
		i += j
		if b[i] == '\n' || i+1 == len(b) || b[i+1] != '\n' {
			return true
		}
		i += 2
	}
	return false
}

// errorLog routes go-smtp's own messages (failed accepts, TLS handshakes,
// panics in a session) to the logger. They never hold message content.
type errorLog struct{ logger *slog.Logger }

func (l errorLog) Printf(format string, v ...any) {
	l.logger.Warn("smtp: " + fmt.Sprintf(format, v...))
}

func (l errorLog) Println(v ...any) {
	l.logger.Warn("smtp: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}
