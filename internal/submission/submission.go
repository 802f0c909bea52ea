// Package submission is `mailyard submission` (docs/submission.md): SMTP
// for applications that send with a credential, the way they send through
// Mailgun, SES or Postmark. AUTH PLAIN or LOGIN takes the credential's
// username and its secret key, checked like the API's bearer token; each
// message is taken as written, stored with its recipients, and sent by the
// same email workflow as API emails. It never relays anything else: the
// From must be at the credential's verified domain.
package submission

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/keyusage"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/ratelimit"
	"github.com/mailyard/mailyard/internal/searchattr"
	"github.com/mailyard/mailyard/internal/smtpserver"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/workflows/email"
)

// MaxRecipients is the most RCPT TO of one message, as the API allows.
const MaxRecipients = 50

// maxAuthFailures closes the connection after this many failed AUTHs.
const maxAuthFailures = 3

// Timeouts of the steps of a session that wait on others.
const (
	storeTimeout = 10 * time.Second
	startTimeout = 5 * time.Second
)

// permissionSend is the permission a credential needs to send.
const permissionSend = "send"

// Replies of docs/submission.md.
var (
	errTLSFirst     = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Must issue a STARTTLS command first"}
	errAuthRequired = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	errAuthFailed   = &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "Authentication credentials invalid"}
	errTooManyFails = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "Too many failed authentications, closing connection"}
	errNotYourFrom  = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Sender address is not at the credential's domain"}
	errNotVerified  = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "The credential's domain is not verified"}
	errNestedMail   = &smtp.SMTPError{Code: 503, EnhancedCode: smtp.EnhancedCode{5, 5, 1}, Message: "Nested MAIL command (send RSET first)"}
	errBadRecipient = &smtp.SMTPError{Code: 501, EnhancedCode: smtp.EnhancedCode{5, 1, 3}, Message: "Bad recipient address syntax"}
	errNeedsUTF8    = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 6, 7}, Message: "Non-ASCII header fields need SMTPUTF8 (MAIL FROM ... SMTPUTF8)"}
	errBadHeader    = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "The message needs a header with exactly one From address"}
	errLongLine     = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "A line of the message is longer than 998 characters (RFC 5322 2.1.1): encode the body as quoted-printable or base64"}
	errUnreadable   = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "The message header cannot be read: each field is a name, a colon right after it, and printable text (RFC 5322)"}
	errManyFields   = &smtp.SMTPError{Code: 552, EnhancedCode: smtp.EnhancedCode{5, 3, 4}, Message: "The message header has more than 1000 fields"}
	// errControl is permanent: the API refuses the same text with a 422,
	// and a NUL could never be stored, so a 451 would be retried for ever.
	errControl = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "The Subject or the From display name contains a control character"}
)

// Backend makes the sessions of the submission server.
type Backend struct {
	Store    *store.Store
	Temporal client.Client
	// Limits is the per-key rate limit the API charges too; nil is off.
	Limits *ratelimit.Limiter[int64]
	// Usage records each key's last use (nil: not recorded); its Run is
	// the caller's to start.
	Usage *keyusage.Recorder
	// AllowInsecureAuth offers AUTH without TLS (tests, dev on loopback).
	AllowInsecureAuth bool
	// Schedule and Retention are the email workflow's, as the API passes
	// them (nil: the workflow's default schedule).
	Schedule  []time.Duration
	Retention time.Duration
	// EagerStart starts the workflows with eager workflow start, for a
	// process whose worker shares Temporal (`mailyard dev`).
	EagerStart bool
	Logger     *slog.Logger

	// starts are the workflow starts under way after a 250.
	starts smtpserver.Starts
}

// NewSession implements smtp.Backend.
func (b *Backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{b: b, conn: c}, nil
}

// Wait waits for the workflow starts under way.
func (b *Backend) Wait() { b.starts.Wait() }

type session struct {
	b    *Backend
	conn *smtp.Conn

	// After a successful AUTH: the key (its digest, to see a revocation at
	// every MAIL FROM) and its domain.
	key      *store.APIKey
	digest   []byte
	failures int

	domain *store.Domain
	utf8   bool
	rcpts  []string
}

func (s *session) secure() bool {
	_, ok := s.conn.TLSConnectionState()
	return ok
}

// AuthMechanisms offers AUTH only over TLS (or where insecure AUTH is
// allowed): a password never crosses the network in the clear.
func (s *session) AuthMechanisms() []string {
	if !s.secure() && !s.b.AllowInsecureAuth {
		return nil
	}
	return []string{sasl.Plain, sasl.Login}
}

// Auth checks the credential's username and secret key.
func (s *session) Auth(mech string) (sasl.Server, error) {
	if !s.secure() && !s.b.AllowInsecureAuth {
		return nil, errTLSFirst
	}
	switch mech {
	case sasl.Plain:
		return unreadableFails{sasl.NewPlainServer(func(identity, username, password string) error {
			if identity != "" && identity != username {
				return s.fail()
			}
			return s.authenticate(username, password)
		}), s.fail}, nil
	case sasl.Login:
		return &loginServer{auth: s.authenticate}, nil
	}
	return nil, smtp.ErrAuthUnknownMechanism
}

// authenticate accepts an active key with the send permission, scoped to a
// domain, whose username is the one given.
func (s *session) authenticate(username, secret string) error {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key, err := keyauth.Check(ctx, s.b.Store, secret)
	if err != nil && !errors.Is(err, keyauth.ErrMalformed) && !errors.Is(err, store.ErrNotFound) {
		s.b.Logger.Warn("submission: cannot check a credential", "error", err)
		return smtpserver.ErrUnavailable
	}
	if err != nil || key.Username != username || !key.Permissions.Has(permissionSend) || key.SendingDomainID == nil {
		return s.fail()
	}
	s.key, s.digest, s.failures = key, keys.Digest(secret), 0
	return nil
}

// fail counts a failed AUTH; the third closes the connection.
func (s *session) fail() error {
	s.failures++
	if s.failures >= maxAuthFailures {
		smtpserver.CloseAfterReply(s.conn)
		return errTooManyFails
	}
	return errAuthFailed
}

// Mail checks, for every message, that the key is still active, its domain
// verified, the envelope sender at that domain, and the rate limit.
func (s *session) Mail(from string, opts *smtp.MailOptions) error {
	if s.key == nil {
		return errAuthRequired
	}
	// go-smtp takes a MAIL in the middle of a transaction to the session,
	// and keeps the transaction's recipients if the session refuses it:
	// the recipients and the checks of the first MAIL would carry over to
	// whatever the second one was refused for (a revoked key, an
	// unverified domain). RFC 5321 §4.1.4 answers it 503.
	if s.domain != nil {
		return errNestedMail
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key, d, err := s.activeKey(ctx)
	if err != nil {
		return err
	}
	if from != "" && !atDomain(from, d.Domain) {
		return errNotYourFrom
	}
	if s.b.Limits != nil {
		if v := s.b.Limits.Take(key.ID, time.Now()); !v.Allowed {
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 7, 0},
				Message: "The credential is over its rate limit; try again in " + strconv.Itoa(int(v.RetryAfter/time.Second)) + " s"}
		}
	}
	s.b.Usage.Seen(key.ID, key.LastUsedAt)
	s.key, s.domain, s.utf8 = key, d, opts != nil && opts.UTF8
	return nil
}

// activeKey reads the session's key again, with its domain: a key revoked
// (or whose domain was deleted or is no longer verified) since AUTH sends
// nothing more, on open connections too.
func (s *session) activeKey(ctx context.Context) (*store.APIKey, *store.Domain, error) {
	key, err := s.b.Store.ActiveAPIKeyByDigest(ctx, s.digest)
	if errors.Is(err, store.ErrNotFound) {
		s.key = nil
		return nil, nil, errAuthFailed
	}
	if err != nil {
		return nil, nil, smtpserver.ErrUnavailable
	}
	// The key's domain comes with it (nil once deleted).
	if d := key.Domain; d != nil && d.Status == store.DomainVerified {
		return key, d, nil
	}
	return nil, nil, errNotVerified
}

// Rcpt takes up to MaxRecipients addresses (go-smtp answers 452 4.5.3
// beyond, counting repeats); recipients not in To or Cc are Bcc.
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if s.domain == nil {
		return errAuthRequired
	}
	a, err := mailmsg.ParseAddress(to)
	if err != nil {
		return errBadRecipient
	}
	// An address given twice (in any case) is sent to once, as the API
	// sends it: two recipients would mean two deliveries and two events.
	if slices.ContainsFunc(s.rcpts, func(r string) bool { return strings.EqualFold(r, a.Address) }) {
		return nil
	}
	s.rcpts = append(s.rcpts, a.Address)
	return nil
}

// Data stores the message and its recipients and answers 250 with the
// email's id once they are committed; the workflow is started after.
func (s *session) Data(r io.Reader) error {
	raw, err := smtpserver.ReadMessage(r)
	if err != nil {
		return err
	}
	id := uuid.Must(uuid.NewV7()).String()
	prepared, info, err := mailmsg.PrepareSubmitted(raw, id, s.domain.Domain, time.Now(), s.utf8)
	var repeated *mailmsg.RepeatedFieldError
	switch {
	case errors.Is(err, mailmsg.ErrFromDomain):
		return errNotYourFrom
	case errors.Is(err, mailmsg.ErrNonASCII):
		return errNeedsUTF8
	case errors.Is(err, mailmsg.ErrControl):
		return errControl
	case errors.Is(err, mailmsg.ErrBadHeader):
		return errUnreadable
	case errors.Is(err, mailmsg.ErrLongLine):
		return errLongLine
	case errors.Is(err, mailmsg.ErrManyFields):
		return errManyFields
	case errors.As(err, &repeated):
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 6, 0},
			Message: "The message header has more than one " + repeated.Field + " field (RFC 5322 allows one)"}
	case err != nil:
		return errBadHeader
	}
	from := info.From.Address
	if info.From.Name != "" {
		from = info.From.Name + " <" + info.From.Address + ">"
	}
	e := &store.Email{
		ID: id, OrganizationID: s.key.OrganizationID, DomainID: s.domain.ID, Source: store.SourceSMTP,
		FromAddress: from, To: info.To, Cc: info.Cc, Subject: info.Subject, Content: prepared,
		MessageIDHeader: &info.MessageID,
		// Submitted mail is tracked as its domain says (docs/tracking.md).
		TrackOpens: s.domain.TrackOpens, TrackClicks: s.domain.TrackClicks, TrackUnsubscribe: s.domain.TrackUnsubscribe,
		// The client is told the id: the email is promised even if its
		// workflow does not start now (the API's sweep starts it).
		Answered: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	// Checked again: the client holds the transaction open as long as it
	// likes between MAIL FROM and the end of the data.
	if _, _, err := s.activeKey(ctx); err != nil {
		return err
	}
	if err := s.b.Store.CreateEmail(ctx, e, s.rcpts); err != nil {
		s.b.Logger.Warn("submission: cannot store an email; answering 451", "error", err)
		return smtpserver.ErrUnavailable
	}
	s.b.starts.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		owner := searchattr.Owner{OrganizationID: e.OrganizationID, DomainID: e.DomainID}
		start := email.Starting{EmailID: e.ID, Owner: owner, Schedule: s.b.Schedule, Retention: s.b.Retention, Eager: s.b.EagerStart}
		if err := email.Start(ctx, s.b.Temporal, start); err != nil {
			s.b.Logger.Warn("submission: email stored, its workflow not started yet (the API's sweep will)", "email_id", e.ID, "error", err)
		}
	})
	s.b.Logger.Info("submission: email queued", "email_id", id, "key_id", s.key.ID, "recipients", len(s.rcpts), "bytes", len(raw))
	return &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: "queued as " + id}
}

// Reset forgets the message, not the authentication.
func (s *session) Reset() { s.domain, s.utf8, s.rcpts = nil, false, nil }

// Logout ends the session.
func (s *session) Logout() error { return nil }

// atDomain reports whether addr is at domain or one of its subdomains.
func atDomain(addr, domain string) bool {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return false
	}
	host := strings.ToLower(addr[at+1:])
	return host == domain || strings.HasSuffix(host, "."+domain)
}

// unreadableFails answers a response its mechanism cannot read (a PLAIN
// blob without its two NULs, "user:pass" from a misconfigured client) as a
// failed AUTH, 535 and counted, instead of go-smtp's temporary 454, which the
// client would retry for ever (docs/submission.md).
type unreadableFails struct {
	sasl.Server
	fail func() error
}

func (u unreadableFails) Next(response []byte) ([]byte, bool, error) {
	challenge, done, err := u.Server.Next(response)
	if _, reply := err.(*smtp.SMTPError); err != nil && !reply {
		return nil, true, u.fail()
	}
	return challenge, done, err
}

// loginServer is the server side of AUTH LOGIN (draft-murchison-sasl-login),
// which go-sasl only implements for clients: the username and the password
// each answer a challenge, or the username comes as the initial response.
type loginServer struct {
	auth     func(username, password string) error
	username string
	step     int
}

func (l *loginServer) Next(response []byte) ([]byte, bool, error) {
	switch l.step {
	case 0:
		if response == nil {
			l.step = 1
			return []byte("Username:"), false, nil
		}
		l.username, l.step = string(response), 2
		return []byte("Password:"), false, nil
	case 1:
		l.username, l.step = string(response), 2
		return []byte("Password:"), false, nil
	default:
		return nil, true, l.auth(l.username, string(response))
	}
}
