// Package inbound is the SMTP server at the bounce host, `mailyard inbound`
// (docs/inbound.md): the MX of every domain's MAIL FROM subdomain. It takes
// mail only for addresses Mailyard handed out (an email's envelope sender,
// fbl@ and unsubscribe+<token>@ of the bounce host), stores each message
// and answers 250 only once it is committed, then starts the message's
// workflow (workflows/inbound), which reads and applies it. It never relays
// anything anywhere.
package inbound

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/smtpserver"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracktoken"
	inboundwf "github.com/mailyard/mailyard/workflows/inbound"
)

// maxRecipients bounds RCPT TO per message: a report goes to one address.
const maxRecipients = 20

// maxRefused bounds the refused RCPT TO of a connection: past them the next
// RCPT TO gets errTooManyRefused and the connection is closed, so that one
// connection cannot try address after address (each untagged candidate
// costs a query).
const maxRefused = 10

// storeTimeout bounds each database step of a session; past it the client
// gets 451 and sends again later.
const storeTimeout = 10 * time.Second

// startTimeout bounds the workflow start after the commit: when Temporal
// does not answer, the message is safe in the database and the sweep starts
// it, so the 250 never waits on Temporal.
const startTimeout = 5 * time.Second

// ErrNoSuchRecipient refuses an address Mailyard did not hand out.
var ErrNoSuchRecipient = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such recipient here"}

var (
	errTooManyRecipients = &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 5, 3}, Message: "Too many recipients"}
	// errOtherEmail defers a recipient of another email than the message's
	// first: the workflow applies a message to one email, so each email's
	// reports must come in a message of their own (the client sends the
	// rest in another transaction, as after any 452).
	errOtherEmail     = &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 5, 3}, Message: "One email's return path per message, send the others separately"}
	errTooManyRefused = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "Too many refused recipients, closing connection"}
	// go-smtp takes any byte in an address, a quoted NUL included, which
	// PostgreSQL cannot store: such a message would get 451 on every retry.
	// No address has control characters, so they are refused for good.
	errBadSender    = &smtp.SMTPError{Code: 501, EnhancedCode: smtp.EnhancedCode{5, 1, 7}, Message: "Bad sender address syntax"}
	errBadRecipient = &smtp.SMTPError{Code: 501, EnhancedCode: smtp.EnhancedCode{5, 1, 3}, Message: "Bad recipient address syntax"}
)

// tagsMigration is the migration that introduced tags: every email that
// existed when it ran was given the untagged envelope sender it had been
// sent with, and every later email is tagged.
const tagsMigration = "20261125000010"

// clockSkew widens the time of tagsMigration (the database's clock) against
// the creation time in email ids (UUIDv7, the creating process's clock).
const clockSkew = time.Hour

// Backend makes the sessions of the inbound server.
type Backend struct {
	Store    *store.Store
	Temporal client.Client
	Tags     *bouncetag.Tagger
	// Tokens check the token of unsubscribe+<token>@ before the message
	// is taken (nil: such addresses are refused).
	Tokens     *tracktoken.Keys
	BounceHost string
	// Retention is how long a message's bytes are kept after it is handled
	// (MAILYARD_EMAIL_RETENTION).
	Retention time.Duration
	Logger    *slog.Logger

	// starts are the workflow starts under way after a 250.
	starts smtpserver.Starts

	// untaggedUntil is the newest creation time an email with an untagged
	// envelope sender can have: tagsMigration's time plus clockSkew. It is
	// read from the database once (zero until then).
	untaggedMu    sync.Mutex
	untaggedUntil time.Time
}

// validUnsubscribe reports whether local is unsubscribe+<token> with a
// token Mailyard minted: a made-up one is refused before its message is
// stored, as any address Mailyard did not hand out is.
func (b *Backend) validUnsubscribe(local string) bool {
	token, ok := bouncetag.UnsubscribeToken(local)
	if !ok || b.Tokens == nil {
		return false
	}
	_, err := b.Tokens.Parse(tracktoken.Unsubscribe, token)
	return err == nil
}

// NewSession implements smtp.Backend.
func (b *Backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{b: b, conn: c}, nil
}

type session struct {
	b          *Backend
	conn       *smtp.Conn
	from       string
	recipients []string
	// email is the email whose envelope sender is a recipient; a message
	// names at most one.
	email *store.Email
}

// Mail accepts any sender, the null sender of bounces ("") included, but
// one with a control character or bytes that are not UTF-8 (go-smtp takes
// any byte from 0x80 up): the stored sender is what the sender sent.
func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	if !utf8.ValidString(from) || strings.ContainsFunc(from, unicode.IsControl) {
		return errBadSender
	}
	s.from = from
	return nil
}

// Rcpt accepts only the addresses of docs/inbound.md, and closes the
// connection after maxRefused refusals (counted on the connection, so that
// STARTTLS does not start them again).
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if smtpserver.Refusals(s.conn) >= maxRefused {
		smtpserver.CloseAfterReply(s.conn)
		return errTooManyRefused
	}
	err := s.rcpt(to)
	if err != nil {
		smtpserver.Refuse(s.conn)
	}
	return err
}

func (s *session) rcpt(to string) error {
	if len(s.recipients) >= maxRecipients {
		return errTooManyRecipients
	}
	// Refused before any lookup: store.SameAddress trims white space, so
	// a stored envelope sender followed by a VT, NEL or NBSP would match,
	// and the recipient be stored with it. No address this host answers
	// for has either.
	if strings.ContainsFunc(to, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
		return errBadRecipient
	}
	local, domain, ok := strings.Cut(to, "@")
	if !ok {
		return ErrNoSuchRecipient
	}
	if strings.EqualFold(domain, s.b.BounceHost) {
		if strings.EqualFold(local, bouncetag.FeedbackLocal) || s.b.validUnsubscribe(local) {
			s.recipients = append(s.recipients, to)
			return nil
		}
		return ErrNoSuchRecipient
	}
	// The tag is checked before the database is asked, so a flood of
	// made-up tagged addresses costs no query. An untagged address costs
	// one only if its id dates from before tags; maxRefused bounds those.
	rp, ok := s.b.Tags.Parse(to)
	if !ok {
		return ErrNoSuchRecipient
	}
	id := rp.EmailID
	if s.email != nil && !strings.EqualFold(id, s.email.ID) {
		return errOtherEmail
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if !rp.Tagged {
		legacy, err := s.b.couldBeUntagged(ctx, id)
		if err != nil {
			s.b.Logger.Warn("inbound: cannot read when tags began", "error", err)
			return smtpserver.ErrUnavailable
		}
		if !legacy {
			return ErrNoSuchRecipient
		}
	}
	e, _, err := s.b.Store.EmailEnvelope(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return ErrNoSuchRecipient
	}
	if err != nil {
		s.b.Logger.Warn("inbound: cannot look up an email", "email_id", id, "error", err)
		return smtpserver.ErrUnavailable
	}
	// An untagged address is accepted only for an email that was sent with
	// it (before tags); a tagged one only as stored, or as a recipient's
	// return path made from what is stored.
	if e.EnvelopeSender == nil || !s.b.Tags.HandedOut(*e.EnvelopeSender, to, rp) {
		return ErrNoSuchRecipient
	}
	if s.email == nil {
		s.email = e
	}
	s.recipients = append(s.recipients, to)
	return nil
}

// Data stores the message and answers 250 only once it is committed.
func (s *session) Data(r io.Reader) error {
	raw, err := smtpserver.ReadMessage(r)
	if err != nil {
		return err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return smtpserver.ErrUnavailable
	}
	m := &store.InboundMessage{ID: id.String(), MailFrom: s.from, Recipients: store.AddressList(s.recipients), Raw: raw}
	var owner searchattr.Owner
	if s.email != nil {
		m.EmailID, m.OrganizationID, m.DomainID = &s.email.ID, &s.email.OrganizationID, &s.email.DomainID
		owner = searchattr.Owner{OrganizationID: s.email.OrganizationID, DomainID: s.email.DomainID}
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := s.b.Store.CreateInboundMessage(ctx, m); err != nil {
		s.b.Logger.Warn("inbound: cannot store a message; answering 451", "error", err)
		return smtpserver.ErrUnavailable
	}
	s.b.Logger.Info("inbound: message received", "inbound_id", m.ID, "bytes", len(raw))
	// The 250 goes out now: the message is committed, and Temporal being
	// slow or down must not hold the sender. A start that fails, or that a
	// stopping server does not make, is made by the sweep.
	s.b.starts.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		if err := inboundwf.Start(ctx, s.b.Temporal, m.ID, owner, s.b.Retention); err != nil {
			s.b.Logger.Warn("inbound: message stored, its workflow not started yet (the sweep will)", "inbound_id", m.ID, "error", err)
		}
	})
	return nil
}

// couldBeUntagged reports whether an email with this id could have the
// untagged envelope sender, that is, was created before tags: only such an
// untagged address is worth a query. Email ids are UUIDv7, whose first 48
// bits are the creation time in milliseconds.
func (b *Backend) couldBeUntagged(ctx context.Context, id string) (bool, error) {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return false, nil
	}
	until, err := b.tagsBegan(ctx)
	if err != nil {
		return false, err
	}
	created := time.Unix(u.Time().UnixTime())
	return created.Before(until), nil
}

// tagsBegan returns untaggedUntil, reading it the first time. The lock is
// not held during the query, so a slow database holds up no other session;
// a few queries at once at the start are harmless.
func (b *Backend) tagsBegan(ctx context.Context) (time.Time, error) {
	b.untaggedMu.Lock()
	until := b.untaggedUntil
	b.untaggedMu.Unlock()
	if !until.IsZero() {
		return until, nil
	}
	at, err := b.Store.MigrationAppliedAt(ctx, tagsMigration)
	if err != nil {
		return time.Time{}, err
	}
	b.untaggedMu.Lock()
	b.untaggedUntil = at.Add(clockSkew)
	b.untaggedMu.Unlock()
	return at.Add(clockSkew), nil
}

// Reset forgets the transaction (not the refusals of the connection).
func (s *session) Reset() {
	s.from, s.recipients, s.email = "", nil, nil
}

// Logout ends the session.
func (s *session) Logout() error { return nil }
