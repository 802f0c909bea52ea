// Package smtpserver holds the listener rules that both of Mailyard's SMTP
// servers follow: `mailyard inbound` (the MX of the bounce host) and
// `mailyard submission` (customers' applications, with AUTH). What differs
// between the two (which recipients are accepted, where a message is stored,
// how AUTH works) is the caller's smtp.Backend and smtp.Session; what must
// not differ lives here, so that it cannot drift apart. The rules are
// documented for operators in the repository's docs/smtp.md.
//
// On every listener:
//
//   - A message is at most Config.MaxMessageBytes (10 MiB by default),
//     advertised with SIZE; a larger one gets 552 5.3.4.
//   - A connection that sends or receives nothing for Config.IdleTimeout
//     (5 minutes by default) is closed, also in the middle of DATA.
//   - Config.MaxSessionTime (30 minutes by default) after it was accepted,
//     a connection waiting for a command gets 421 and is closed, however
//     busy it was, so that a client trickling bytes cannot hold a slot for
//     ever; a message under way then has a third of that time more to
//     finish, and nothing goes on past that.
//   - At most Config.MaxConnections (500 by default) connections are open at
//     once, and at most Config.MaxConnectionsPerIP (a tenth of that) from
//     one client address; one more gets "421 4.7.0 <hostname> Too many
//     connections[ from your address], try again later" and is closed
//     before any SMTP session starts, without the accept loop waiting for it
//     (under implicit TLS it is closed without the 421, which it could not
//     read).
//   - When Config.MessageRate is set, a client address (loopback aside)
//     that sends more MAIL FROM commands than its token bucket holds gets
//     "421 4.7.0 Too much mail from your address, try again later" and is
//     closed.
//   - Shutdown answers a connection waiting for a command 421 and closes
//     it; a message being received is finished and answered first.
//   - 8BITMIME, SMTPUTF8, PIPELINING, ENHANCEDSTATUSCODES and CHUNKING are
//     advertised, STARTTLS when a certificate is configured.
//   - Only <CRLF>.<CRLF> ends DATA, and a message containing a bare <CR> or
//     bare <LF> is refused with 550 5.6.0 by ReadMessage, which every
//     Session's Data must use. Together this is the SMTP smuggling defence:
//     no sequence such as <LF>.<LF> can end a message here, and no message
//     containing one is stored, so none can be relayed to a server that would
//     end a message there. The one bare <CR> that ReadMessage cannot see is
//     the one right after a dot that starts a line: go-smtp v0.25.1's
//     dot-unstuffing drops ".<CR>" there and keeps the next byte, so the
//     message is stored without it (and after ".<CR><CR><LF>" go-smtp no
//     longer knows a line starts, so the next "." line is kept as content
//     rather than ending DATA; see TestDotCRCRHidesTheEndOfData). Such a
//     message is stored altered, not refused, but what is stored still
//     holds no bare line ending, and a relay dot-stuffs it like any other.
//     Neither can be caught here: under STARTTLS only go-smtp sees the
//     decrypted bytes. CHUNKING (BDAT) stays on: its chunks reach
//     ReadMessage unchanged and get the same check.
//   - STARTTLS (and implicit TLS through Server.ServeTLS) use TLS 1.2 or
//     newer with a certificate that is re-read from disk when its files
//     change.
package smtpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/sync/semaphore"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/ratelimit"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxConnections  = 500
	DefaultMaxMessageBytes = 10 << 20
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultMaxSessionTime  = 30 * time.Minute
)

// rejectWriteTimeout bounds the write of the 421 to a connection over the
// limit, so that a client that does not read cannot hold the socket.
const rejectWriteTimeout = 2 * time.Second

// maxLineLength is go-smtp's default, kept on purpose. RFC 5321 allows 512
// octets for a command line and 1000 for a text line; go-smtp applies one
// limit to both (counting from one <LF> to the next, DATA included, BDAT
// chunks excluded) and doubles the larger one, so that sloppy senders, such
// as bounces of broken MTAs, still get through while memory stays bounded.
// A longer line (2000 bytes counting its <CRLF>) fails the message with
// 554 5.0.0 and ends the connection with 500 5.4.0.
const maxLineLength = 2000

// Config is what a caller chooses; everything else is a rule of the package.
type Config struct {
	// Hostname is the domain in the greeting, in the EHLO reply and in the
	// 421 to connections over the limit. Required.
	Hostname string
	// MaxConnections caps open connections across all listeners of this
	// Server. 0 means DefaultMaxConnections.
	MaxConnections int
	// MaxConnectionsPerIP caps the open connections of one client address
	// (an IPv4 address or an IPv6 /64), so that one host cannot take all
	// of MaxConnections. 0 means a tenth of MaxConnections (at least 1).
	// Connections from loopback are not capped per address: they come
	// from a proxy or an application on the same machine.
	MaxConnectionsPerIP int
	// MaxMessageBytes caps one message, advertised as SIZE and checked
	// for MAIL FROM's SIZE=, for DATA and for BDAT. 0 means
	// DefaultMaxMessageBytes. go-smtp v0.25.1's DATA reader needs one byte
	// of the budget to see the end marker, so over DATA (not BDAT) a
	// message of exactly MaxMessageBytes gets 552 too; one byte less passes.
	MaxMessageBytes int64
	// MaxMessageBytesInFlight caps the bytes of the messages that all
	// sessions hold at once, read and not yet stored (budgetBackend). 0
	// means 8 × MaxMessageBytes.
	MaxMessageBytesInFlight int64
	// MessageRate limits the messages (MAIL FROM commands) of one client
	// address (an IPv4 address or an IPv6 /64) to a token bucket; one past
	// it gets ErrTooMuchMail and the connection is closed. Loopback is not
	// limited, as for MaxConnectionsPerIP. The zero value is no limit.
	MessageRate config.RateLimit
	// MaxRecipients caps RCPT per message (advertised as LIMITS RCPTMAX);
	// one more gets 452 4.5.3. 0 means no cap.
	MaxRecipients int
	// IdleTimeout closes a connection on which nothing is read or written
	// for that long. 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxSessionTime ends a connection that long after it was accepted: a
	// wait for a command then ends with go-smtp's "421 4.4.2". A message
	// (or command) still arriving has a third of MaxSessionTime more, its
	// grace, so that a busy client is not cut in the middle; past that the
	// connection is cut whatever it is doing. 0 means
	// DefaultMaxSessionTime.
	MaxSessionTime time.Duration
	// TLSCertFile and TLSKeyFile are a PEM certificate chain and its key:
	// both or neither. With them STARTTLS is offered and ServeTLS works.
	// They are re-read when they change on disk (certificate renewal).
	TLSCertFile, TLSKeyFile string
	// AllowInsecureAuth offers AUTH before STARTTLS. Only for tests and
	// trusted networks: without it AUTH is offered only under TLS.
	AllowInsecureAuth bool
	// Logger receives go-smtp's internal errors and certificate reloads.
	// Nil means slog.Default(). Message contents are never logged.
	Logger *slog.Logger
}

// Server is one SMTP server with the rules above. It may serve several
// listeners (for example :587 with Serve and :465 with ServeTLS); they share
// the connection limit.
type Server struct {
	smtp    *smtp.Server
	log     *slog.Logger
	host    string
	idle    time.Duration
	session time.Duration // MaxSessionTime
	grace   time.Duration // after MaxSessionTime, for a message under way
	perIP   int
	certs   *certReloader // nil without a certificate
	slots   chan struct{} // one token per open connection
	reject  chan struct{} // one token per 421 being written
	// capLoopback caps loopback connections per address too (tests).
	capLoopback bool

	mu       sync.Mutex
	conns    map[*limitedConn]struct{}
	clients  map[string]int // open connections by clientKey
	draining bool           // Shutdown has begun
}

// New checks cfg and builds a Server around backend. It loads the certificate
// once, so a broken configuration fails at start and not at the first
// STARTTLS.
func New(cfg Config, backend smtp.Backend) (*Server, error) {
	if cfg.Hostname == "" {
		return nil, errors.New("smtpserver: Hostname is required")
	}
	if backend == nil {
		return nil, errors.New("smtpserver: backend is required")
	}
	if cfg.MaxConnections < 0 || cfg.MaxConnectionsPerIP < 0 || cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytesInFlight < 0 || cfg.MaxRecipients < 0 ||
		cfg.IdleTimeout < 0 || cfg.MaxSessionTime < 0 {
		return nil, errors.New("smtpserver: limits must not be negative")
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, errors.New("smtpserver: TLSCertFile and TLSKeyFile go together")
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxConnectionsPerIP == 0 {
		cfg.MaxConnectionsPerIP = max(cfg.MaxConnections/10, 1)
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.MaxMessageBytesInFlight == 0 {
		cfg.MaxMessageBytesInFlight = 8 * cfg.MaxMessageBytes
	}
	if cfg.MaxMessageBytesInFlight < cfg.MaxMessageBytes {
		return nil, errors.New("smtpserver: MaxMessageBytesInFlight must hold one message of MaxMessageBytes")
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxSessionTime == 0 {
		cfg.MaxSessionTime = DefaultMaxSessionTime
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}

	s := &Server{
		log:     cfg.Logger,
		host:    cfg.Hostname,
		idle:    cfg.IdleTimeout,
		session: cfg.MaxSessionTime,
		grace:   cfg.MaxSessionTime / 3,
		perIP:   cfg.MaxConnectionsPerIP,
		slots:   make(chan struct{}, cfg.MaxConnections),
		// As many 421s in flight as connections served (at least 64):
		// refusing costs no more sockets than serving. Past that, in a
		// flood, extra connections are closed without a reply.
		reject:  make(chan struct{}, max(cfg.MaxConnections, 64)),
		conns:   make(map[*limitedConn]struct{}),
		clients: make(map[string]int),
	}

	// A session waits for the budget at most half the idle time-out: its
	// connection's read deadline runs while it waits.
	srv := smtp.NewServer(&budgetBackend{Backend: backend, budget: semaphore.NewWeighted(cfg.MaxMessageBytesInFlight),
		size: cfg.MaxMessageBytesInFlight, wait: cfg.IdleTimeout / 2,
		clientKey: s.clientKey, perClient: perClientShare(cfg.MaxMessageBytesInFlight, cfg.MaxMessageBytes),
		messages: ratelimit.New[string](cfg.MessageRate)})
	srv.Domain = cfg.Hostname
	srv.MaxMessageBytes = cfg.MaxMessageBytes
	srv.MaxRecipients = cfg.MaxRecipients
	srv.MaxLineLength = maxLineLength
	// go-smtp sets these before every command line and reply; limitedConn
	// also pushes the read deadline on while data arrives, which makes it an
	// idle timeout that covers a long DATA as well, and keeps both within
	// MaxSessionTime.
	srv.ReadTimeout = cfg.IdleTimeout
	srv.WriteTimeout = cfg.IdleTimeout
	srv.AllowInsecureAuth = cfg.AllowInsecureAuth
	// go-smtp always advertises PIPELINING, 8BITMIME, ENHANCEDSTATUSCODES and
	// CHUNKING. CHUNKING stays: BDAT hands the Session the chunks' bytes as
	// they are, so ReadMessage applies the same bare <CR>/<LF> check to them,
	// and a length-counted chunk has no end marker to smuggle anyway.
	// BINARYMIME, which would make bare line endings legal, stays off.
	srv.EnableSMTPUTF8 = true
	srv.ErrorLog = slogLogger{cfg.Logger}

	if cfg.TLSCertFile != "" {
		certs, err := newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.Logger)
		if err != nil {
			return nil, err
		}
		s.certs = certs
		srv.TLSConfig = s.tlsConfig()
	}
	s.smtp = srv
	return s, nil
}

func (s *Server) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: s.certs.getCertificate,
	}
}

// Serve accepts plain connections on ln (STARTTLS is offered when a
// certificate is configured) until Shutdown or Close. Like net/http it
// returns nil after those.
func (s *Server) Serve(ln net.Listener) error {
	return s.smtp.Serve(s.limit(ln, true))
}

// ServeTLS accepts implicit-TLS connections on ln (submission's :465) until
// Shutdown or Close, with the same certificate as STARTTLS. It fails at once
// without a certificate.
//
// A connection over the limit is closed without the 421 here: the client
// expects a TLS handshake first, and spending one on a connection that is
// refused would defeat the limit.
func (s *Server) ServeTLS(ln net.Listener) error {
	if s.certs == nil {
		return errors.New("smtpserver: ServeTLS needs TLSCertFile and TLSKeyFile")
	}
	return s.smtp.Serve(tls.NewListener(s.limit(ln, false), s.tlsConfig()))
}

// Shutdown stops accepting and ends the open connections: one waiting for
// a command gets go-smtp's "421 4.4.2" and is closed at once, one in the
// middle of a command or a message is answered first and then gets the
// same. go-smtp alone would wait for clients to QUIT, which an idle client
// never does. If ctx ends first, the connections still open are closed
// (and logged): that is still an ordinary stop, and Shutdown returns nil.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	for _, c := range s.openConns() {
		c.drain()
	}
	err := s.smtp.Shutdown(ctx)
	if ctx.Err() != nil {
		// go-smtp leaves the connections open here, and its Close refuses
		// to run after a Shutdown, so they are closed through our tracking.
		if n := s.closeConns(); n > 0 {
			s.log.Warn("smtp server: shutdown closed connections still busy at its deadline", "connections", n)
		}
		return nil
	}
	if errors.Is(err, smtp.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops accepting and closes every connection at once.
func (s *Server) Close() error {
	err := s.smtp.Close()
	s.closeConns()
	if errors.Is(err, smtp.ErrServerClosed) {
		return nil
	}
	return err
}

// closeConns closes every open connection and returns how many there were.
func (s *Server) closeConns() int {
	conns := s.openConns()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

// openConns returns the connections open now, to act on without holding
// s.mu (closing one takes it).
func (s *Server) openConns() []*limitedConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.conns))
}

// ErrUnavailable is for a Session to return when it cannot do its work for
// now, typically because the database is unreachable: the client keeps the
// message and tries again later.
var ErrUnavailable = &smtp.SMTPError{
	Code:         451,
	EnhancedCode: smtp.EnhancedCode{4, 3, 0},
	Message:      "Temporary failure, try again later",
}

// slogLogger routes go-smtp's ErrorLog to slog. go-smtp only logs connection
// errors and panics there (addresses, errors, stacks), never message data:
// its Debug writer, which would, is never set.
type slogLogger struct{ l *slog.Logger }

func (l slogLogger) Printf(format string, v ...any) {
	l.l.Warn("smtp server: " + fmt.Sprintf(format, v...))
}

func (l slogLogger) Println(v ...any) {
	l.l.Warn("smtp server: " + fmt.Sprint(v...))
}
