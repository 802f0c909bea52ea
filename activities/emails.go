package activities

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/activity"

	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/emailevent"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/mailmsg"
	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/smtpsend"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/workflows/email"
)

// Emails builds, signs and sends emails, and records each recipient's
// outcome with its event (docs/sending.md).
type Emails struct {
	Store  *store.Store
	Box    *secrets.Box
	Sender *smtpsend.Sender
	// Tags computes the tagged envelope sender (docs/inbound.md).
	Tags *bouncetag.Tagger
	// Runs starts the webhook deliveries of the outcome events.
	Runs *deliveryruns.Runs
	// Links personalizes tracked emails, whose links point at TrackingURL
	// (or at the domain's verified custom tracking domain); nil without
	// MAILYARD_TRACKING_URL (docs/tracking.md).
	Links       *tracking.Links
	TrackingURL string
	// SendLimit bounds the SMTP part of one attempt (default
	// DefaultSendLimit); it must end well before the attempt's own time
	// limit in the workflow, so that recipients whose servers did not answer
	// in time are recorded as deferred and the schedule goes on, instead of
	// the whole attempt timing out and being retried with nothing recorded.
	SendLimit time.Duration

	// signers keeps the DKIM keys opened for signing.
	signers signerCache
}

// signerCache keeps DKIM private keys, decrypted and parsed, by key id:
// opening one took about a fifth of a millisecond per email. A key's
// sealed bytes never change; an erased key is refused before the cache is
// asked (openKey). Past maxCachedSigners keys it starts again empty, which
// bounds it without bookkeeping.
type signerCache struct {
	mu   sync.Mutex
	byID map[int64]crypto.Signer
}

const maxCachedSigners = 1024

func (c *signerCache) get(id int64) (crypto.Signer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.byID[id]
	return s, ok
}

func (c *signerCache) put(id int64, s crypto.Signer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil || len(c.byID) >= maxCachedSigners {
		c.byID = make(map[int64]crypto.Signer)
	}
	c.byID[id] = s
}

// DefaultSendLimit is the SMTP budget of one attempt: the email workflow
// gives an attempt 15 minutes in all.
const DefaultSendLimit = 10 * time.Minute

// Bounce types of the bounced event (docs/sending.md).
const (
	bounceHard       = "hard"
	bounceSoft       = "soft"
	bounceSuppressed = "suppressed"
)

// reasonDomainDeleted ends the recipients of an email whose domain was
// deleted before they were delivered.
const reasonDomainDeleted = "domain_deleted"

// Prepare is the first step of an email's workflow: it counts the
// recipients as accepted, builds and signs the message unless a previous
// run stored it, and settles the recipients nothing will be sent to
// (suppressed addresses, a deleted domain).
func (a *Emails) Prepare(ctx context.Context, in email.PrepareInput) (email.PrepareResult, error) {
	res, p, err := a.prepare(ctx, in.EmailID)
	if err != nil || p == nil {
		return res, err
	}
	return res, a.settle(ctx, in.EmailID)
}

// prepared is an email as prepare leaves it: what its first attempt needs,
// so that the attempt made in the same step reads nothing again.
type prepared struct {
	e       *store.Email
	d       *store.Domain
	pending []store.EmailRecipient // the recipients to send to
}

// prepare is Prepare without settling the email; a nil *prepared means the
// email is gone or already settled (its domain was deleted).
func (a *Emails) prepare(ctx context.Context, emailID string) (email.PrepareResult, *prepared, error) {
	e, d, key, err := a.Store.EmailToPrepare(ctx, emailID)
	if errors.Is(err, store.ErrNotFound) {
		return email.PrepareResult{Gone: true}, nil, nil
	}
	if err != nil {
		return email.PrepareResult{}, nil, err
	}
	recipients, err := a.Store.RecipientsForDelivery(ctx, e.ID)
	if err != nil {
		return email.PrepareResult{}, nil, err
	}
	// An untracked email's one message is signed before the email is
	// accepted, and stored in the same statement; a tracked email's
	// recipients each get their own message after it.
	acceptance := store.Acceptance{EnvelopeSender: a.Tags.Sender(e.ID, d.MailFromSubdomain), Recipients: len(recipients)}
	if d.DeletedAt == nil && e.ErasedAt == nil && !e.Tracked() && e.SignedMessage == nil {
		if acceptance.SignedMessage, err = a.buildAndSign(e, d, key); err != nil {
			return email.PrepareResult{}, nil, err
		}
		acceptance.Selector = key.Selector
	}
	// A scheduled email's time has come (the workflow waited for it); its
	// recipients are counted as accepted the first time it is prepared.
	accepted, err := a.Store.AcceptEmail(ctx, e.ID, acceptance)
	if err != nil {
		return email.PrepareResult{}, nil, err
	}
	// The message stored first, this run's or an earlier one's (none for a
	// tracked email, or once erased).
	e.EnvelopeSender, e.SignedMessage = &accepted.EnvelopeSender, accepted.SignedMessage
	pending := slices.DeleteFunc(recipients, func(r store.EmailRecipient) bool { return r.Final() })
	if d.DeletedAt != nil {
		return email.PrepareResult{}, nil, a.endAll(ctx, e, d, pending, reasonDomainDeleted)
	}
	if e.Tracked() && e.ErasedAt == nil {
		if err := a.buildAndSignEach(ctx, e, d, key, pending); err != nil {
			return email.PrepareResult{}, nil, err
		}
	}

	left, err := a.dropSuppressed(ctx, e, d, pending)
	if err != nil {
		return email.PrepareResult{}, nil, err
	}
	return email.PrepareResult{Pending: len(left)}, &prepared{e: e, d: d, pending: left}, nil
}

// dropSuppressed makes the pending recipients whose address is on the
// suppression list suppressed (a bounced event of type suppressed), and
// returns the others. Every attempt asks: an address may be suppressed
// while its recipient waits for a retry (a complaint about another email,
// a hard bounce, an unsubscribe), and the list is to be obeyed before each
// send (docs/suppressions-and-stats.md).
func (a *Emails) dropSuppressed(ctx context.Context, e *store.Email, d *store.Domain, pending []store.EmailRecipient) ([]store.EmailRecipient, error) {
	addrs := make([]string, len(pending))
	for i, r := range pending {
		addrs[i] = r.Address
	}
	suppressed, err := a.Store.SuppressedAmong(ctx, e.OrganizationID, addrs, e.TrackUnsubscribe)
	if err != nil || len(suppressed) == 0 {
		return pending, err
	}
	var left []store.EmailRecipient
	for _, r := range pending {
		if !suppressed[r.Address] {
			left = append(left, r)
			continue
		}
		change := store.RecipientChange{Position: r.Position, Status: store.RecipientSuppressed, Response: "not sent: the address is on the suppression list"}
		if _, err := a.Store.ChangeRecipient(ctx, e.ID, change, a.outcome(e, d, r, outcome{bounceType: bounceSuppressed})); err != nil {
			return nil, err
		}
	}
	return left, nil
}

// buildAndSign renders the message once and signs it with the domain's
// active DKIM key; AcceptEmail stores it, and every attempt sends the stored
// bytes.
func (a *Emails) buildAndSign(e *store.Email, d *store.Domain, key *store.DKIMKey) ([]byte, error) {
	raw, err := buildMessage(e, d)
	if err != nil {
		return nil, err
	}
	signer, err := a.signer(e, d, key)
	if err != nil {
		return nil, err
	}
	signed, err := mailmsg.Sign(raw, d.Domain, key.Selector, signer)
	if err != nil {
		return nil, fmt.Errorf("email %s: sign: %w", e.ID, err)
	}
	return signed, nil
}

// buildAndSignEach renders, for a tracked email, each pending recipient's
// own message (docs/tracking.md) and signs it, and stores the email's links.
// A recipient whose message a previous run stored keeps it; the links come
// out the same from the same HTML, and the first stored are kept.
func (a *Emails) buildAndSignEach(ctx context.Context, e *store.Email, d *store.Domain, key *store.DKIMKey, pending []store.EmailRecipient) error {
	var need []*store.EmailRecipient
	for i := range pending {
		if !pending[i].HasMessage {
			need = append(need, &pending[i])
		}
	}
	if len(need) == 0 {
		return nil
	}
	if a.Links == nil {
		return fmt.Errorf("email %s is tracked, but MAILYARD_TRACKING_URL is not set on this worker", e.ID)
	}
	raw, err := buildMessage(e, d)
	if err != nil {
		return err
	}
	signer, err := a.signer(e, d, key)
	if err != nil {
		return err
	}
	base, err := a.trackingBase(ctx, d)
	if err != nil {
		return err
	}
	id, err := uuid.Parse(e.ID)
	if err != nil {
		return fmt.Errorf("email %s: %w", e.ID, err)
	}
	settings := tracking.Settings{Opens: e.TrackOpens, Clicks: e.TrackClicks, Unsubscribe: e.TrackUnsubscribe}
	linksSaved := false
	for _, r := range need {
		p, err := a.Links.Personalize(raw, base, settings, id, r.Position)
		if err != nil {
			// A submitted message whose MIME cannot be read with
			// certainty goes out as it came, rather than not at all.
			if activity.IsActivity(ctx) {
				activity.GetLogger(ctx).Warn("email not tracked: its message cannot be rewritten", "email_id", e.ID, "error", err)
			}
			p = tracking.Personalized{Message: raw}
		}
		if !linksSaved {
			if err := a.Store.SaveEmailLinks(ctx, e.ID, p.Links); err != nil {
				return err
			}
			linksSaved = true
		}
		signed, err := mailmsg.Sign(p.Message, d.Domain, key.Selector, signer)
		if err != nil {
			return fmt.Errorf("email %s: sign: %w", e.ID, err)
		}
		// Stored, not kept: the attempt reads each message as it sends it.
		if err := a.Store.SaveRecipientMessage(ctx, e.ID, r.Position, signed); err != nil {
			return err
		}
		r.HasMessage = true
	}
	return nil
}

// trackingBase is where a domain's tracking links point: its custom
// tracking domain once that is verified, else MAILYARD_TRACKING_URL.
func (a *Emails) trackingBase(ctx context.Context, d *store.Domain) (string, error) {
	if d.TrackingDomain == nil {
		return a.TrackingURL, nil
	}
	status, err := a.Store.TrackingDomainStatus(ctx, d.ID)
	if err != nil || status != store.RecordVerified {
		return a.TrackingURL, err
	}
	return "https://" + *d.TrackingDomain, nil
}

// signer opens the domain's active DKIM key (read with the email) for
// signing.
func (a *Emails) signer(e *store.Email, d *store.Domain, key *store.DKIMKey) (crypto.Signer, error) {
	if key == nil {
		return nil, fmt.Errorf("email %s: domain %d has no active DKIM key: %w", e.ID, d.ID, store.ErrNoDKIMKey)
	}
	signer, err := a.openKey(key)
	if err != nil {
		return nil, fmt.Errorf("email %s: %w", e.ID, err)
	}
	return signer, nil
}

// buildMessage is the message of an email before signing: built from the
// API request, or as submitted over SMTP (prepared when it was accepted).
// It is dated when the email was created or, for a scheduled email, at its
// scheduled time, so one scheduled days ahead does not arrive dated days
// ago. Both are stored, so a message built again is the same.
func buildMessage(e *store.Email, d *store.Domain) ([]byte, error) {
	if e.Source == store.SourceSMTP {
		return e.Content, nil
	}
	var msg mailmsg.Message
	if err := json.Unmarshal(e.Content, &msg); err != nil {
		return nil, fmt.Errorf("email %s: stored content: %w", e.ID, err)
	}
	date := e.CreatedAt
	if e.ScheduledAt != nil && e.ScheduledAt.After(date) {
		date = *e.ScheduledAt
	}
	raw, err := mailmsg.Build(&msg, e.ID, d.Domain, date)
	if err != nil {
		return nil, fmt.Errorf("email %s: build: %w", e.ID, err)
	}
	return raw, nil
}

func (a *Emails) openKey(k *store.DKIMKey) (crypto.Signer, error) {
	if k.PrivateKeyEnc == nil {
		return nil, fmt.Errorf("DKIM key %d has been erased", k.ID)
	}
	if signer, ok := a.signers.get(k.ID); ok {
		return signer, nil
	}
	signer, err := a.parseKey(k)
	if err == nil {
		a.signers.put(k.ID, signer)
	}
	return signer, err
}

// parseKey decrypts and parses a DKIM key's private key.
func (a *Emails) parseKey(k *store.DKIMKey) (crypto.Signer, error) {
	der, err := a.Box.Open(k.PrivateKeyEnc, store.DKIMKeyBinding(k.Selector, k.Generation))
	if err != nil {
		return nil, fmt.Errorf("DKIM key %d cannot be decrypted (is MAILYARD_ENCRYPTION_KEY the one it was created with?)", k.ID)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("DKIM key %d: %w", k.ID, err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("DKIM key %d is not a signing key", k.ID)
	}
	return signer, nil
}

// Attempt sends the stored message to every pending recipient and records
// each answer. Receiver answers are results, not errors; an error means the
// attempt could not be made or recorded, and Temporal retries it (a
// recipient whose answer was recorded is not sent to again).
func (a *Emails) Attempt(ctx context.Context, in email.AttemptInput) (email.AttemptResult, error) {
	defer keepAlive(ctx)()
	e, d, err := a.Store.EmailForDelivery(ctx, in.EmailID)
	if errors.Is(err, store.ErrNotFound) {
		return email.AttemptResult{}, nil
	}
	if err != nil {
		return email.AttemptResult{}, err
	}
	pending, err := a.Store.PendingRecipients(ctx, e.ID)
	if err != nil {
		return email.AttemptResult{}, err
	}
	var out email.AttemptResult
	if len(pending) > 0 && d.DeletedAt == nil {
		left, err := a.dropSuppressed(ctx, e, d, pending)
		if err != nil {
			return out, err
		}
		out.Bounced, pending = len(pending)-len(left), left
	}
	if len(pending) == 0 {
		return out, a.settle(ctx, e.ID)
	}
	res, err := a.attempt(ctx, in, e, d, pending)
	res.Bounced += out.Bounced
	return res, err
}

// attempt is Attempt for an email and pending recipients already read.
func (a *Emails) attempt(ctx context.Context, in email.AttemptInput, e *store.Email, d *store.Domain, pending []store.EmailRecipient) (email.AttemptResult, error) {
	var out email.AttemptResult
	if d.DeletedAt != nil {
		out.Bounced = len(pending)
		return out, a.endAll(ctx, e, d, pending, reasonDomainDeleted)
	}
	limit := a.SendLimit
	if limit <= 0 {
		limit = DefaultSendLimit
	}
	rec := &answerRecorder{a: a, ctx: ctx, final: in.Final, e: e, d: d, pending: pending,
		unread: make([]error, len(pending)), handled: make([]bool, len(pending))}
	sendCtx, cancel := context.WithTimeout(ctx, limit)
	started := time.Now()
	// Each session's answers are recorded as it ends: a worker that dies
	// while a slow domain's session still runs has recorded the 250s of the
	// others, which the attempt Temporal makes next would send again.
	results, err := a.send(sendCtx, e, d, pending, rec.unread, rec.record)
	cancel()
	if err != nil {
		return out, err
	}
	metrics.ObserveEmailAttempt(time.Since(started))
	all := make([]int, len(results))
	for i := range all {
		all[i] = i
	}
	rec.record(all, results)
	out = rec.out
	if ended := ctx.Err(); ended != nil {
		return out, ended
	}
	if len(rec.errs) > 0 {
		return out, errors.Join(rec.errs...)
	}
	return out, a.settle(ctx, e.ID)
}

// answerRecorder records the answers of one attempt, each recipient's once,
// as the sessions end (from their goroutines) and at the end.
type answerRecorder struct {
	a       *Emails
	ctx     context.Context // the attempt's
	final   bool
	e       *store.Email
	d       *store.Domain
	pending []store.EmailRecipient
	// unread[i] says why recipient i's message could not be read (a.send
	// sets it before recipient i's session ends).
	unread []error

	mu      sync.Mutex
	handled []bool
	out     email.AttemptResult
	errs    []error
}

// record records the answers of the recipients at positions (results[k]
// is positions[k]'s) not recorded yet. When the attempt's own context ended
// while it sent (its time limit, the worker stopping, Temporal giving up on
// it), the answers servers gave are still recorded, on a context of their
// own: a recipient whose 250 was not recorded would be sent to again. Those
// that got no answer (the connection closed under them) are left to the
// next attempt, which Temporal runs since the step fails. Every answer is
// recorded even when one cannot be, for the same reason; the errors fail
// the step.
func (r *answerRecorder) record(positions []int, results []smtpsend.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// On a context of its own, even while the attempt's lives: one that
	// ended in the middle of these writes would lose the answers after it.
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), recordAfterEndTimeout)
	defer cancel()
	for k, i := range positions {
		res := results[k]
		if r.handled[i] || res.Code == 0 && r.ctx.Err() != nil {
			continue
		}
		r.handled[i] = true
		if r.unread[i] != nil {
			// Not sent, because its message could not be read: nothing
			// is recorded, and the step fails once the others are, so
			// Temporal runs it again for this recipient.
			r.errs = append(r.errs, r.unread[i])
			continue
		}
		if err := r.recordOne(recordCtx, r.pending[i], res); err != nil {
			r.errs = append(r.errs, err)
		}
	}
}

func (r *answerRecorder) recordOne(ctx context.Context, rcpt store.EmailRecipient, res smtpsend.Result) error {
	a, e, d := r.a, r.e, r.d
	code := res.Code
	change := store.RecipientChange{Position: rcpt.Position, Attempted: true, SMTPCode: &code, Response: smtpResponse(res)}
	var effects func(context.Context, bun.IDB, string) error
	switch {
	case res.Status == smtpsend.Delivered:
		change.Status = store.RecipientDelivered
		effects = a.outcome(e, d, rcpt, outcome{delivered: true, code: res.Code, message: res.Message})
		r.out.Delivered++
	case res.Status == smtpsend.HardBounce:
		change.Status = store.RecipientBounced
		effects = a.outcome(e, d, rcpt, outcome{bounceType: bounceHard, code: res.Code, message: res.Message})
		r.out.Bounced++
	case r.final:
		change.Status = store.RecipientBounced
		effects = a.outcome(e, d, rcpt, outcome{bounceType: bounceSoft, code: res.Code, message: res.Message})
		r.out.Bounced++
	default:
		change.Status = store.RecipientDeferred
		effects = a.deferred(e)
		r.out.Deferred++
		r.out.Pending++
	}
	if _, err := a.Store.ChangeRecipient(ctx, e.ID, change, effects); err != nil {
		return err
	}
	metrics.CountEmailRecipient(recipientOutcome(change.Status))
	return nil
}

// recordAfterEndTimeout bounds the recording of the answers an attempt got
// before its context ended.
const recordAfterEndTimeout = 10 * time.Second

// send makes one attempt to every pending recipient: the email's one
// message, or each recipient's own when the email is tracked, read from the
// store as its transaction begins (unread[i] is why recipient i's could
// not be; it was not sent). Each recipient gets its own return path and so
// its own transaction (docs/inbound.md); an email from before tags keeps
// its one untagged sender, and its recipients share a transaction per
// domain.
func (a *Emails) send(ctx context.Context, e *store.Email, d *store.Domain, pending []store.EmailRecipient, unread []error, done smtpsend.Done) ([]smtpsend.Result, error) {
	from := envelopeSender(e, d)
	_, perRecipient := a.Tags.RecipientSender(from, 0)
	if !e.Tracked() && e.SignedMessage == nil {
		return nil, fmt.Errorf("email %s has no signed message to send", e.ID)
	}
	if !perRecipient && !e.Tracked() {
		addrs := make([]string, len(pending))
		for i, r := range pending {
			addrs[i] = r.Address
		}
		return a.Sender.SendReporting(ctx, from, addrs, e.SignedMessage, done), nil
	}
	envs := make([]smtpsend.Envelope, len(pending))
	for i, r := range pending {
		env := smtpsend.Envelope{From: from, Recipient: r.Address, Message: e.SignedMessage}
		if perRecipient {
			env.From, _ = a.Tags.RecipientSender(from, r.Position)
		}
		if e.Tracked() {
			if !r.HasMessage {
				return nil, fmt.Errorf("email %s has no signed message for recipient %d", e.ID, r.Position)
			}
			env.Message, env.Load = nil, func(ctx context.Context) ([]byte, error) {
				msg, err := a.Store.RecipientMessage(ctx, e.ID, r.Position)
				if err == nil && msg == nil {
					err = fmt.Errorf("email %s: recipient %d's message was erased", e.ID, r.Position)
				}
				if ctx.Err() == nil {
					// The attempt's time running out defers the
					// recipient, like a server that did not answer.
					unread[i] = err
				}
				return msg, err
			}
		}
		envs[i] = env
	}
	return a.Sender.SendEachReporting(ctx, envs, done), nil
}

// recipientOutcome is the metrics label of a recipient's status after an
// attempt.
func recipientOutcome(status string) string {
	switch status {
	case store.RecipientDelivered:
		return metrics.EmailDelivered
	case store.RecipientBounced:
		return metrics.EmailBounced
	default:
		return metrics.EmailDeferred
	}
}

// keepAlive heartbeats until the returned function is called, at a
// quarter of the activity's heartbeat timeout: Temporal learns that the
// worker still runs the attempt, and retries it soon after the worker dies
// (SIGKILL, lost machine) instead of at the start-to-close timeout. It is
// the worker's liveness, not the attempt's progress: each SMTP command has
// its own time-out in the transport.
func keepAlive(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	every := activity.GetInfo(ctx).HeartbeatTimeout / 4
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// FirstAttempt prepares the email and, when asked, makes its first
// attempt: the two steps in one local activity (the email workflow's
// local-first-attempt change). Each is idempotent, so a retried run
// resumes where the last stopped. When its local tries fail, the workflow
// runs it as a regular activity, an attempt's, which heartbeats.
func (a *Emails) FirstAttempt(ctx context.Context, in email.FirstAttemptInput) (email.FirstAttemptResult, error) {
	defer keepAlive(ctx)()
	prep, p, err := a.prepare(ctx, in.EmailID)
	out := email.FirstAttemptResult{PrepareResult: prep}
	if err != nil || p == nil {
		return out, err
	}
	if prep.Pending == 0 || !in.Send {
		return out, a.settle(ctx, in.EmailID)
	}
	// The attempt settles the email (and starts the deliveries of any
	// suppressed recipient's event) itself.
	out.Attempt, err = a.attempt(ctx, email.AttemptInput{EmailID: in.EmailID, Attempt: 1, Final: in.Final}, p.e, p.d, p.pending)
	out.Attempted = err == nil
	return out, err
}

// Reschedule records a scheduled email's new time.
func (a *Emails) Reschedule(ctx context.Context, in email.RescheduleActivityInput) error {
	return a.Store.RescheduleEmail(ctx, in.EmailID, in.ScheduledAt)
}

// Cancel records that a scheduled email was canceled, and erases it.
func (a *Emails) Cancel(ctx context.Context, in email.CancelInput) error {
	return a.Store.CancelEmail(ctx, in.EmailID)
}

// Erase erases the stored message: for a run canceled once sending has
// begun, and, for runs started before they ended when settled, once the
// retention time is over (newer emails are erased by the retention sweep).
func (a *Emails) Erase(ctx context.Context, in email.EraseInput) error {
	return a.Store.EraseEmailContent(ctx, in.EmailID)
}

// endAll bounces every pending recipient without sending (soft: nothing
// was wrong with the address, so it is not suppressed).
func (a *Emails) endAll(ctx context.Context, e *store.Email, d *store.Domain, pending []store.EmailRecipient, reason string) error {
	for _, r := range pending {
		change := store.RecipientChange{Position: r.Position, Status: store.RecipientBounced, Response: "not sent: " + reason}
		if _, err := a.Store.ChangeRecipient(ctx, e.ID, change, a.outcome(e, d, r, outcome{bounceType: bounceSoft, reason: reason})); err != nil {
			return err
		}
	}
	return a.settle(ctx, e.ID)
}

// settle marks the email sent once every recipient is final, and starts the
// webhook deliveries of its outcome events (emailevent.Settle).
func (a *Emails) settle(ctx context.Context, emailID string) error {
	return emailevent.Settle(ctx, a.Store, a.Runs, emailID)
}

// outcome is a recipient's final outcome as its event tells it.
type outcome struct {
	delivered  bool
	bounceType string
	code       int
	message    string
	reason     string
}

// outcomeData is the data of a delivered or bounced event (docs/sending.md):
// the fields of an ingested event plus what the platform knows of the bounce.
type outcomeData struct {
	MessageID      string `json:"message_id"`
	ToEmail        string `json:"to_email"`
	Subject        string `json:"subject"`
	BounceType     string `json:"bounce_type,omitempty"`
	SMTPCode       int    `json:"smtp_code,omitempty"`
	SMTPMessage    string `json:"smtp_message,omitempty"`
	EnhancedStatus string `json:"enhanced_status,omitempty"`
	Reason         string `json:"reason,omitempty"`
	// Async tells a bounce reported later by mail (true) from one seen in
	// the SMTP conversation (false); absent on delivered events.
	Async *bool `json:"async,omitempty"`
}

// outcome stores the recipient's event with its webhook deliveries, counts
// it in the statistics and, for a hard bounce, suppresses the address, in
// the transaction that makes the recipient final.
func (a *Emails) outcome(e *store.Email, d *store.Domain, r store.EmailRecipient, o outcome) func(context.Context, bun.IDB, string) error {
	return func(ctx context.Context, tx bun.IDB, _ string) error {
		at := time.Now().UTC().Truncate(time.Microsecond)
		typ, counter := eventtype.Bounced, store.StatBounced
		if o.delivered {
			typ, counter = eventtype.Delivered, store.StatDelivered
		}
		data := outcomeData{
			MessageID: e.ID, ToEmail: r.Address, Subject: e.Subject,
			BounceType: o.bounceType, SMTPCode: o.code, SMTPMessage: o.message, Reason: o.reason,
		}
		if !o.delivered {
			sync := false
			data.Async = &sync
		}
		eventID := store.EmailEventIDPrefix(e.ID) + strconv.Itoa(r.Position)
		if _, err := emailevent.Record(ctx, tx, e, d.Domain, eventID, typ, counter, r.Address, at, data); err != nil {
			return err
		}
		if o.bounceType == bounceHard {
			return store.Suppress(ctx, tx, e.OrganizationID, r.Address, store.SuppressionHardBounce)
		}
		return nil
	}
}

// deferred counts a recipient's first deferral in the statistics (counts
// are per recipient, not per attempt).
func (a *Emails) deferred(e *store.Email) func(context.Context, bun.IDB, string) error {
	return func(ctx context.Context, tx bun.IDB, before string) error {
		if before != store.RecipientQueued {
			return nil
		}
		return store.CountEmailEvent(ctx, tx, e.OrganizationID, e.DomainID, store.StatDeferred, time.Now(), 1)
	}
}

// envelopeSender is the email-wide envelope sender of an email: bounces
// come back to the domain's MAIL FROM subdomain, tagged with the email's id.
// Prepare stores it, and each recipient's own return path is made from it
// (send); an email prepared by a release before tags has the untagged form.
func envelopeSender(e *store.Email, d *store.Domain) string {
	if e.EnvelopeSender != nil {
		return *e.EnvelopeSender
	}
	return bouncetag.Untagged(e.ID, d.MailFromSubdomain)
}

// smtpResponse is the recipient's last response as the API shows it.
func smtpResponse(r smtpsend.Result) string {
	if r.Code == 0 {
		return r.Message
	}
	return strconv.Itoa(r.Code) + " " + r.Message
}
