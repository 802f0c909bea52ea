// Package devsmtp is the SMTP sink of `mailyard dev`: a server on a local
// address that accepts any message and keeps it as a file, so a developer
// can read what Mailyard sent without any mail leaving the machine.
package devsmtp

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
)

// maxMessageBytes is far above what Mailyard sends; it only stops a runaway
// client from filling the disk.
const maxMessageBytes = 64 << 20

// Server is a running sink.
type Server struct {
	smtp   *smtp.Server
	ln     net.Listener
	served chan struct{}
	// reports holds what plays the remote side of late bounces and
	// complaints (reports.go); nil sends none.
	reports *reporter
}

// Start listens on addr (host:port; port 0 picks a free one) and writes
// each message it receives to dir, which it creates if needed, as
// <email_id>.eml. The email id comes from the envelope sender
// bounces+<email_id>.<position>.<tag>@..., the form Mailyard sends with; a
// message without one gets a random name. Further messages of the same
// email (one per recipient) are <email_id>.2.eml, .3.eml, ...
// Files appear whole (written to a temporary file, then linked) and only
// their owner can read them (mode 0600): they hold whatever personal data
// the messages do.
func Start(addr, dir string, logger *slog.Logger) (*Server, error) {
	return StartWithReports(addr, dir, logger, nil)
}

// StartWithReports is Start with reports: the sink also answers
// bounce-later* recipients with a DSN and complain* recipients with an ARF
// report, by mail to the bounce host (reports.go).
func StartWithReports(addr, dir string, logger *slog.Logger, cfg *Reports) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dev SMTP: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dev SMTP: %w", err)
	}
	var rep *reporter
	if cfg != nil {
		rep = &reporter{cfg: *cfg, logger: logger, stop: make(chan struct{})}
	}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &session{dir: dir, logger: logger, reports: rep}, nil
	}))
	srv.Domain = "mailyard-dev"
	srv.MaxMessageBytes = maxMessageBytes
	srv.ReadTimeout = time.Minute
	srv.WriteTimeout = time.Minute
	srv.ErrorLog = errorLog{logger}
	s := &Server{smtp: srv, ln: ln, served: make(chan struct{}), reports: rep}
	go func() {
		defer close(s.served)
		_ = srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops listening, drops open connections and waits for the server
// to stop.
func (s *Server) Close() error {
	err := s.smtp.Close()
	// go-smtp closes only the listeners Serve has registered; Serve may
	// not have started yet.
	_ = s.ln.Close()
	<-s.served
	if s.reports != nil {
		s.reports.close()
	}
	if errors.Is(err, smtp.ErrServerClosed) {
		return nil
	}
	return err
}

type session struct {
	dir     string
	logger  *slog.Logger
	reports *reporter
	from    string
	to      []string
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	s.from = from
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *session) Reset()        { s.from, s.to = "", nil }
func (s *session) Logout() error { return nil }

func (s *session) Data(r io.Reader) error {
	id, ok := emailID(s.from)
	if !ok {
		id = uuid.NewString()
		s.logger.Warn("dev SMTP: the envelope sender is not bounces+<email_id>.<tag>@...; saving the message under a random name", "file", id+".eml")
	}
	path, n, err := saveMessage(s.dir, id, r)
	if err != nil {
		var smtpErr *smtp.SMTPError
		if errors.As(err, &smtpErr) {
			return smtpErr // e.g. too large
		}
		s.logger.Error("dev SMTP: cannot save a message", "file", path, "error", err)
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "cannot save the message"}
	}
	s.logger.Info("dev SMTP: message saved", "email_id", id, "file", path, "bytes", n)
	if s.reports != nil {
		s.reports.answer(id, s.from, s.to, path)
	}
	return nil
}

// emailIDPattern keeps the id a plain file name: no separators, no "..".
var emailIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// emailID extracts the email id from an envelope sender of the form
// bounces+<email_id>.<position>.<tag>@<domain> (a recipient's own return
// path), bounces+<email_id>.<tag>@<domain> or, for emails sent before tags,
// bounces+<email_id>@<domain>.
func emailID(envelopeSender string) (string, bool) {
	const prefix = "bounces+"
	local, _, found := strings.Cut(envelopeSender, "@")
	if !found || len(local) <= len(prefix) || !strings.EqualFold(local[:len(prefix)], prefix) {
		return "", false
	}
	id, _, _ := strings.Cut(local[len(prefix):], ".")
	return id, emailIDPattern.MatchString(id)
}

// maxCopies bounds the messages kept for one email id.
const maxCopies = 10000

// saveMessage writes r to dir as <id>.eml or, when that exists (each
// recipient of an email gets a transaction of its own), as <id>.2.eml,
// <id>.3.eml, ... It writes through a temporary
// file in the same directory, so a reader never sees half a message, and
// links it under its name, which never replaces a message already kept.
func saveMessage(dir, id string, r io.Reader) (string, int64, error) {
	tmp, err := os.CreateTemp(dir, ".incoming-*.tmp") // mode 0600
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return "", 0, err
	}
	for i := 1; i <= maxCopies; i++ {
		name := id + ".eml"
		if i > 1 {
			name = fmt.Sprintf("%s.%d.eml", id, i)
		}
		path := filepath.Join(dir, name)
		err := os.Link(tmp.Name(), path)
		if err == nil {
			return path, n, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", 0, err
		}
	}
	return "", 0, fmt.Errorf("%d messages of email %s kept already", maxCopies, id)
}

// errorLog routes go-smtp's own error messages (failed accepts, panics in a
// session) to the logger.
type errorLog struct{ logger *slog.Logger }

func (l errorLog) Printf(format string, v ...any) {
	l.logger.Warn("dev SMTP: " + fmt.Sprintf(format, v...))
}

func (l errorLog) Println(v ...any) {
	l.logger.Warn("dev SMTP: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}
