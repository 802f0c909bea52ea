package smtpserver

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/sync/semaphore"

	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/ratelimit"
)

// ErrBusy answers a message that could not be taken because the server's
// sessions already hold Config.MaxMessageBytesInFlight of messages: a
// temporary failure, so the client sends it again later.
var ErrBusy = &smtp.SMTPError{
	Code:         451,
	EnhancedCode: smtp.EnhancedCode{4, 3, 2},
	Message:      "Too busy receiving messages, try again later",
}

// budgetBackend holds the limits per client address of every session: the
// rate of its messages (Config.MessageRate), checked at MAIL FROM, and its
// share of the bytes in flight.
//
// It gives every session's Data a reader that takes each byte it
// reads from the server's budget, and gives the message's bytes back when
// Data returns (the message stored, or refused). A message of 10 MiB costs
// its session several times that in memory (the buffer, the statement that
// stores it), and 500 connections may each send one: the budget bounds
// them together. A session that finds the budget spent waits, not reading
// from its connection (TCP holds the client back), and gets ErrBusy if it
// stays spent.
//
// One client address (Server.clientKey: an IPv4 address, an IPv6 /64) holds
// at most perClient of the budget, whatever its number of connections:
// otherwise a few connections trickling large messages, each read pushing
// the idle time-out on, would hold the whole budget for the session time
// and every other sender would get ErrBusy. Past its share a client gets
// ErrBusy at once, without waiting.
type budgetBackend struct {
	smtp.Backend
	budget *semaphore.Weighted
	size   int64 // of budget
	wait   time.Duration
	// clientKey names the address a connection's bytes count against
	// ("": not counted per address, as loopback).
	clientKey func(net.Addr) string
	perClient int64
	// messages limits each client address's MAIL FROM (Config.MessageRate;
	// nil: no limit).
	messages *ratelimit.Limiter[string]

	mu   sync.Mutex
	held map[string]int64 // per client address
}

// perClientShare is a client address's share of a budget of size for
// messages of at most maxMessage bytes: a quarter, and at least two
// messages.
func perClientShare(size, maxMessage int64) int64 { return max(size/4, 2*maxMessage) }

func (b *budgetBackend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	s, err := b.Backend.NewSession(c)
	if err != nil {
		return s, err
	}
	client := b.clientKey(c.Conn().RemoteAddr())
	// go-smtp looks for AuthSession on the session it is given.
	if a, ok := s.(smtp.AuthSession); ok {
		return &budgetAuthSession{AuthSession: a, b: b, conn: c, client: client}, nil
	}
	return &budgetSession{Session: s, b: b, conn: c, client: client}, nil
}

type budgetSession struct {
	smtp.Session
	b      *budgetBackend
	conn   *smtp.Conn
	client string
}

func (s *budgetSession) Data(r io.Reader) error { return s.b.data(s.Session.Data, r, s.client) }

func (s *budgetSession) Mail(from string, opts *smtp.MailOptions) error {
	if err := s.b.messageAllowed(s.conn, s.client); err != nil {
		return err
	}
	return s.Session.Mail(from, opts)
}

type budgetAuthSession struct {
	smtp.AuthSession
	b      *budgetBackend
	conn   *smtp.Conn
	client string
}

func (s *budgetAuthSession) Data(r io.Reader) error { return s.b.data(s.AuthSession.Data, r, s.client) }

func (s *budgetAuthSession) Mail(from string, opts *smtp.MailOptions) error {
	if err := s.b.messageAllowed(s.conn, s.client); err != nil {
		return err
	}
	return s.AuthSession.Mail(from, opts)
}

// ErrTooMuchMail answers a MAIL FROM past its client address's
// Config.MessageRate; the connection is then closed, and the client sends
// again later, as after any 4xx.
var ErrTooMuchMail = &smtp.SMTPError{
	Code:         421,
	EnhancedCode: smtp.EnhancedCode{4, 7, 0},
	Message:      "Too much mail from your address, try again later",
}

// messageAllowed takes one message from client's rate, or refuses it and
// has the connection closed after the reply.
func (b *budgetBackend) messageAllowed(c *smtp.Conn, client string) error {
	if b.messages == nil || client == "" {
		return nil
	}
	if b.messages.Take(client, time.Now()).Allowed {
		return nil
	}
	metrics.CountSMTPMessageLimited()
	CloseAfterReply(c)
	return ErrTooMuchMail
}

// data runs a session's Data over a reader charged to the budget.
func (b *budgetBackend) data(data func(io.Reader) error, r io.Reader, client string) error {
	br := &budgetReader{r: r, b: b, client: client}
	defer func() {
		b.budget.Release(br.held)
		b.giveBack(client, br.held)
	}()
	return data(br)
}

// takeShare counts n more bytes against client's share, unless that would
// go past it.
func (b *budgetBackend) takeShare(client string, n int64) bool {
	if client == "" {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[client]+n > b.perClient {
		return false
	}
	if b.held == nil {
		b.held = map[string]int64{}
	}
	b.held[client] += n
	return true
}

// giveBack returns n bytes of client's share.
func (b *budgetBackend) giveBack(client string, n int64) {
	if client == "" || n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[client] -= n; b.held[client] <= 0 {
		delete(b.held, client)
	}
}

// budgetReader takes from the budget the bytes each read returned before
// handing them on (a read that waits for the client holds nothing), and
// waits while the budget is spent.
type budgetReader struct {
	r      io.Reader
	b      *budgetBackend
	client string
	held   int64
}

func (r *budgetReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n == 0 {
		return n, err
	}
	// A read never takes more than the whole budget (a budget smaller than
	// a read buffer would otherwise wait for ever).
	take := min(int64(n), r.b.size)
	if !r.b.takeShare(r.client, take) {
		return 0, ErrBusy
	}
	if !r.b.budget.TryAcquire(take) && !r.b.acquireWaiting(take) {
		r.b.giveBack(r.client, take)
		return 0, ErrBusy
	}
	r.held += take
	return n, err
}

// acquireWaiting takes n from the budget, waiting up to b.wait: the slow
// path of a read, when the budget is spent.
func (b *budgetBackend) acquireWaiting(n int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), b.wait)
	defer cancel()
	return b.budget.Acquire(ctx, n) == nil
}
