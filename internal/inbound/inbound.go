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
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/smtpserver"
	"github.com/mailyard/mailyard/internal/store"
	inboundwf "github.com/mailyard/mailyard/workflows/inbound"
)

// maxRecipients bounds RCPT TO per message: a report goes to one address.
const maxRecipients = 20

// storeTimeout bounds each database step of a session; past it the client
// gets 451 and sends again later.
const storeTimeout = 10 * time.Second

// startTimeout bounds the workflow start after the commit: when Temporal
// does not answer, the message is safe in the database and the sweep starts
// it, so the 250 never waits on Temporal.
const startTimeout = 5 * time.Second

// unsubscribeToken is the shape of a one-click unsubscribe token: at most 64
// URL-safe characters.
var unsubscribeToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ErrNoSuchRecipient refuses an address Mailyard did not hand out.
var ErrNoSuchRecipient = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such recipient here"}

// Backend makes the sessions of the inbound server.
type Backend struct {
	Store      *store.Store
	Temporal   client.Client
	Tags       *bouncetag.Tagger
	BounceHost string
	// Retention is how long a message's bytes are kept after it is handled
	// (MAILYARD_EMAIL_RETENTION).
	Retention time.Duration
	Logger    *slog.Logger

	// starts are the workflow starts under way after a 250.
	starts sync.WaitGroup
}

// NewSession implements smtp.Backend.
func (b *Backend) NewSession(*smtp.Conn) (smtp.Session, error) {
	return &session{b: b}, nil
}

type session struct {
	b          *Backend
	from       string
	recipients []string
	// email is the first email whose envelope sender is a recipient.
	email *store.Email
}

// Mail accepts any sender, the null sender of bounces ("") included.
func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	s.from = from
	return nil
}

// Rcpt accepts only the addresses of docs/inbound.md.
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if len(s.recipients) >= maxRecipients {
		return &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 5, 3}, Message: "Too many recipients"}
	}
	local, domain, ok := strings.Cut(to, "@")
	if !ok {
		return ErrNoSuchRecipient
	}
	if strings.EqualFold(domain, s.b.BounceHost) {
		token, unsubscribe := bouncetag.UnsubscribeToken(local)
		if strings.EqualFold(local, bouncetag.FeedbackLocal) || (unsubscribe && unsubscribeToken.MatchString(token)) {
			s.recipients = append(s.recipients, to)
			return nil
		}
		return ErrNoSuchRecipient
	}
	// The tag is checked before the database is asked, so a flood of
	// made-up addresses costs no query.
	id, ok := s.b.Tags.EmailID(to)
	if !ok {
		return ErrNoSuchRecipient
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	e, _, err := s.b.Store.EmailEnvelope(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return ErrNoSuchRecipient
	}
	if err != nil {
		s.b.Logger.Warn("inbound: cannot look up an email", "email_id", id, "error", err)
		return smtpserver.ErrUnavailable
	}
	// An untagged address is accepted only for an email that was sent with
	// it (before tags); a tagged one only as stored.
	if e.EnvelopeSender == nil || !store.SameAddress(*e.EnvelopeSender, to) {
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
	// slow or down must not hold the sender. A start that fails is made by
	// the sweep.
	s.b.starts.Add(1)
	go func() {
		defer s.b.starts.Done()
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		if err := inboundwf.Start(ctx, s.b.Temporal, m.ID, owner, s.b.Retention); err != nil {
			s.b.Logger.Warn("inbound: message stored, its workflow not started yet (the sweep will)", "inbound_id", m.ID, "error", err)
		}
	}()
	return nil
}

// Reset forgets the transaction.
func (s *session) Reset() {
	s.from, s.recipients, s.email = "", nil, nil
}

// Logout ends the session.
func (s *session) Logout() error { return nil }
