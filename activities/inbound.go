package activities

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/internal/bouncereport"
	"github.com/mailyard/mailyard/internal/bouncetag"
	"github.com/mailyard/mailyard/internal/deliveryruns"
	"github.com/mailyard/mailyard/internal/emailevent"
	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/internal/tracktoken"
	"github.com/mailyard/mailyard/workflows/inbound"
)

// Inbound handles messages received at the bounce host: it classifies each
// one and applies what it reports to the email it concerns
// (docs/inbound.md).
type Inbound struct {
	Store *store.Store
	// Runs starts the webhook deliveries of the events a report caused.
	Runs   *deliveryruns.Runs
	Logger *slog.Logger
	// Unsubscribes records mail to unsubscribe+<token>@ the bounce host,
	// the mailto: form of one-click unsubscribe, with the tokens of Tokens
	// (docs/tracking.md); nil: such mail is unrecognized.
	Unsubscribes *tracking.Recorder
	Tokens       *tracktoken.Keys
	// Tags reads the return paths a report came back to or names, which
	// say which recipients it may concern.
	Tags *bouncetag.Tagger
}

// feedbackComplaints are the ARF feedback types that are complaints: the
// recipient does not want the mail. not-spam (the user rescued it) and the
// other types change nothing.
var feedbackComplaints = map[string]bool{"abuse": true, "fraud": true, "virus": true}

// reportedEmail is the email a message concerns, with its recipients.
type reportedEmail struct {
	*store.Email
	domain     string
	recipients []store.EmailRecipient
	// reportable are the positions of the recipients whose own return
	// path the report came back to (or, to fbl@, names): a recipient sees
	// only its own, so a report it forges can concern no other recipient.
	// nil: any recipient, for a report that came back to the email-wide
	// return path, which emails sent before per-recipient return paths
	// handed out (docs/inbound.md).
	reportable map[int]bool
}

// recipientFor returns the recipient a report (or one block of it) names
// in addrs, if it may concern it. A report that names none of the email's
// recipients (providers redact addresses) concerns the one recipient whose
// return path it came back to, or the email's only recipient.
func (e *reportedEmail) recipientFor(addrs ...string) *store.EmailRecipient {
	if r := findRecipient(e.recipients, addrs...); r != nil {
		if !e.mayConcern(r) {
			return nil
		}
		return r
	}
	if e.reportable == nil {
		if len(e.recipients) == 1 {
			return &e.recipients[0]
		}
		return nil
	}
	if len(e.reportable) != 1 {
		return nil
	}
	for i := range e.recipients {
		if e.reportable[e.recipients[i].Position] {
			return &e.recipients[i]
		}
	}
	return nil
}

// mayConcern reports whether the report may concern recipient r.
func (e *reportedEmail) mayConcern(r *store.EmailRecipient) bool {
	return e.reportable == nil || e.reportable[r.Position]
}

// Handle classifies a stored message and applies its effects, each in the
// transaction that records it and at most once per recipient, so the same
// report twice (or this step retried) changes nothing the second time.
func (a *Inbound) Handle(ctx context.Context, in inbound.HandleInput) (inbound.HandleResult, error) {
	m, err := a.Store.InboundMessageByID(ctx, in.InboundID)
	if errors.Is(err, store.ErrNotFound) {
		return inbound.HandleResult{Kind: store.InboundUnrecognized}, nil
	}
	if err != nil {
		return inbound.HandleResult{}, err
	}
	if m.HandledAt != nil {
		// Handled by an earlier try: start what it may have left unstarted.
		// It recorded the email the message concerned, also one a
		// complaint to fbl@ named. Only handled_at says handled: a message
		// without bytes may be an empty one not handled yet, and erased_at
		// says erased.
		out := inbound.HandleResult{Kind: deref(m.Kind)}
		if m.EmailID != nil {
			out.OrganizationID, out.DomainID = deref(m.OrganizationID), deref(m.DomainID)
			if recordsEvents(out.Kind) {
				return out, a.settle(ctx, *m.EmailID)
			}
		}
		return out, nil
	}
	if m.ErasedAt != nil {
		// Never handled, and erased when the retention time ran out (a run
		// that came that late: docs/inbound.md, "Retention"). Its bytes are
		// gone, so it is not classified, counted or marked handled.
		return inbound.HandleResult{Kind: store.InboundUnrecognized}, nil
	}

	report := bouncereport.Parse(m.Raw, bouncereport.Envelope{
		NullSender:  m.MailFrom == "",
		Unsubscribe: toUnsubscribe(m.Recipients),
	})
	email, err := a.reportedEmail(ctx, m, report)
	if err != nil {
		return inbound.HandleResult{}, err
	}
	kind, effects, err := a.apply(ctx, report, email, m.Recipients)
	if err != nil {
		return inbound.HandleResult{}, err
	}

	out := inbound.HandleResult{Kind: kind, Effects: effects}
	emailID := ""
	if email != nil {
		emailID, out.OrganizationID, out.DomainID = email.ID, email.OrganizationID, email.DomainID
	}
	first, err := a.Store.MarkInboundHandled(ctx, m.ID, kind, emailID, out.OrganizationID, out.DomainID)
	if err != nil {
		return out, err
	}
	if first {
		metrics.CountInboundMessage(kind)
		if kind == store.InboundUnrecognized && a.Logger != nil {
			// The id only: the message holds personal data.
			a.Logger.InfoContext(ctx, "inbound message not recognized", "inbound_id", m.ID)
		}
	}
	if email != nil && recordsEvents(kind) {
		return out, a.settle(ctx, email.ID)
	}
	return out, nil
}

// recordsEvents says whether a message of kind may record events of its
// email, whose webhook deliveries settle then starts (also on a try after
// one that recorded them and died). The others (auto-replies, replies,
// arf_other) change nothing, and settling for them would start every
// pending delivery of the email again, for anyone who knows a return path.
func recordsEvents(kind string) bool {
	switch kind {
	case store.InboundDSN, store.InboundARF, store.InboundLegacyBounce, store.InboundUnsubscribe:
		return true
	}
	return false
}

// apply carries out what a report says and returns its final kind and how
// many recipients it changed.
func (a *Inbound) apply(ctx context.Context, report *bouncereport.Report, email *reportedEmail, recipients []string) (string, int, error) {
	switch report.Kind {
	case bouncereport.KindDSN:
		if email == nil {
			return store.InboundDSN, 0, nil
		}
		n, err := a.applyDSN(ctx, report, email)
		return store.InboundDSN, n, err
	case bouncereport.KindARF:
		if report.Feedback == nil || !feedbackComplaints[strings.ToLower(report.Feedback.Type)] {
			return store.InboundARFOther, 0, nil
		}
		if email == nil {
			return store.InboundARF, 0, nil
		}
		n, err := a.applyComplaint(ctx, report.Feedback, email)
		return store.InboundARF, n, err
	case bouncereport.KindAutoReply:
		return store.InboundAutoReply, 0, nil
	case bouncereport.KindLegacyBounce:
		if email == nil {
			return store.InboundUnrecognized, 0, nil
		}
		addrs := make([]string, len(email.recipients))
		for i, r := range email.recipients {
			addrs[i] = r.Address
		}
		addr, status, ok := report.LegacyRecipient(addrs)
		if !ok {
			return store.InboundUnrecognized, 0, nil
		}
		r := findRecipient(email.recipients, addr)
		if !email.mayConcern(r) {
			return store.InboundLegacyBounce, 0, nil
		}
		n, err := a.bounce(ctx, email, *r, asyncBounce{hard: true, enhancedStatus: status,
			response: status + " (reported later by mail)"})
		return store.InboundLegacyBounce, n, err
	}
	if report.Kind == bouncereport.KindUnsubscribe && a.Unsubscribes != nil {
		n, err := a.applyUnsubscribe(ctx, recipients)
		if n == 0 && err == nil {
			return store.InboundUnrecognized, 0, nil
		}
		return store.InboundUnsubscribe, n, err
	}
	return store.InboundUnrecognized, 0, nil
}

// applyUnsubscribe does for each valid unsubscribe+<token> address the
// message was sent to what the one-click POST does; a token that is not
// valid changes nothing.
func (a *Inbound) applyUnsubscribe(ctx context.Context, recipients []string) (int, error) {
	n := 0
	for _, r := range recipients {
		raw, ok := bouncetag.UnsubscribeToken(r)
		if !ok {
			continue
		}
		tok, err := a.Tokens.Parse(tracktoken.Unsubscribe, raw)
		if err != nil {
			continue
		}
		if err := a.Unsubscribes.Unsubscribe(ctx, tok); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// blockRecipient is the address a DSN block is about: its
// Final-Recipient, else its Original-Recipient (RFC 3464 §2.3). An
// Original-Recipient beside a Final-Recipient of another address is the
// alias the failed address was reached through, which says nothing of the
// alias's own mailbox.
func blockRecipient(b bouncereport.DSNRecipient) string {
	if b.FinalRecipient != "" {
		return b.FinalRecipient
	}
	return b.OriginalRecipient
}

// applyDSN applies each per-recipient block of a delivery status
// notification. A report that names any of the email's recipients is read
// for those alone: a block naming someone else (a forwarding target that
// failed, the copy a relay kept) says nothing of the recipient whose return
// path it came back to. Only a report that names none of them (providers
// redact addresses) falls back to that recipient, through its most severe
// block.
func (a *Inbound) applyDSN(ctx context.Context, report *bouncereport.Report, email *reportedEmail) (int, error) {
	blocks := report.Recipients
	named := slices.ContainsFunc(blocks, func(b bouncereport.DSNRecipient) bool {
		return findRecipient(email.recipients, blockRecipient(b)) != nil
	})
	if !named && len(blocks) > 1 {
		blocks = []bouncereport.DSNRecipient{slices.MaxFunc(blocks, func(x, y bouncereport.DSNRecipient) int { return severity(x) - severity(y) })}
	}
	changed := 0
	for _, block := range blocks {
		if named && findRecipient(email.recipients, blockRecipient(block)) == nil {
			continue
		}
		r := email.recipientFor(blockRecipient(block))
		if r == nil {
			continue
		}
		switch block.Action {
		case "failed":
			b := asyncBounce{
				hard:           !temporaryFailure(block),
				enhancedStatus: block.Status,
				code:           block.SMTPCode,
				message:        block.SMTPMessage,
			}
			b.response = dsnResponse(block)
			n, err := a.bounce(ctx, email, *r, b)
			if err != nil {
				return changed, err
			}
			changed += n
		case "delayed":
			if err := a.Store.NoteRecipientResponse(ctx, email.ID, r.Position, dsnResponse(block)); err != nil {
				return changed, err
			}
		}
	}
	return changed, nil
}

// severity orders a report's blocks: a permanent failure, a temporary one,
// a delay, then anything else.
func severity(b bouncereport.DSNRecipient) int {
	switch {
	case b.Action == "failed" && !temporaryFailure(b):
		return 3
	case b.Action == "failed":
		return 2
	case b.Action == "delayed":
		return 1
	}
	return 0
}

// temporaryFailure reports whether a failed recipient's block says the
// failure was temporary (4.x.x, or a 4xx reply when the status is missing):
// a soft bounce, which suppresses nothing.
func temporaryFailure(b bouncereport.DSNRecipient) bool {
	if b.Status != "" {
		return strings.HasPrefix(b.Status, "4.")
	}
	return b.SMTPCode/100 == 4
}

// dsnResponse is the recipient's last_response after a report: the
// server's own words when the report has them.
func dsnResponse(b bouncereport.DSNRecipient) string {
	var s string
	switch {
	case b.SMTPCode != 0:
		s = strconv.Itoa(b.SMTPCode) + " " + b.SMTPMessage
	case b.Status != "":
		s = b.Status
	default:
		s = b.Action
	}
	return strings.TrimSpace(s) + " (reported later by mail)"
}

// asyncBounce is a bounce learned from a report after the SMTP conversation.
type asyncBounce struct {
	hard           bool
	enhancedStatus string
	code           int
	message        string
	response       string
}

// bounce makes a recipient bounced, even one that was delivered, with its
// event, its count and, for a hard bounce, its suppression, in one
// transaction; a recipient already bounced or suppressed is left alone.
func (a *Inbound) bounce(ctx context.Context, email *reportedEmail, r store.EmailRecipient, b asyncBounce) (int, error) {
	change := store.RecipientChange{Position: r.Position, Status: store.RecipientBounced, Response: b.response}
	if b.code != 0 {
		code := b.code
		change.SMTPCode = &code
	}
	bounceType := bounceSoft
	if b.hard {
		bounceType = bounceHard
	}
	async := true
	data := outcomeData{
		MessageID: email.ID, ToEmail: r.Address, Subject: email.Subject, BounceType: bounceType,
		SMTPCode: b.code, SMTPMessage: b.message, EnhancedStatus: b.enhancedStatus, Async: &async,
	}
	changed, err := a.Store.ReviseRecipient(ctx, email.ID, change, func(ctx context.Context, tx bun.IDB, _ string) error {
		at := time.Now().UTC().Truncate(time.Microsecond)
		eventID := store.EmailEventIDPrefix(email.ID) + strconv.Itoa(r.Position) + ":async-bounce"
		if _, err := emailevent.Record(ctx, tx, email.Email, email.domain, eventID, eventtype.Bounced, store.StatBounced, r.Address, at, data); err != nil {
			return err
		}
		if b.hard {
			return store.Suppress(ctx, tx, email.OrganizationID, r.Address, store.SuppressionHardBounce)
		}
		return nil
	})
	if changed {
		return 1, err
	}
	return 0, err
}

// complaintData is the data of a complained event (docs/inbound.md).
type complaintData struct {
	MessageID    string `json:"message_id"`
	ToEmail      string `json:"to_email"`
	Subject      string `json:"subject"`
	FeedbackType string `json:"feedback_type"`
	UserAgent    string `json:"user_agent"`
}

// applyComplaint records the complaint of the recipient the report names
// (Original-Rcpt-To, else the one its return path belongs to): its event
// and count once per recipient, and the address on the organization's
// suppression list. A recipient already bounced or suppressed is left alone
// (docs/inbound.md, "Exactly once").
func (a *Inbound) applyComplaint(ctx context.Context, fb *bouncereport.Feedback, email *reportedEmail) (int, error) {
	r := email.recipientFor(fb.OriginalRcptTo...)
	if r == nil || r.Status == store.RecipientSuppressed || r.Status == store.RecipientBounced {
		// Left alone: a suppressed recipient was sent nothing to complain
		// about, and a complaint would replace the reason it is on the list
		// for (an unsubscribe) with one that stops all its mail.
		return 0, nil
	}
	data := complaintData{
		MessageID: email.ID, ToEmail: r.Address, Subject: email.Subject,
		FeedbackType: strings.ToLower(fb.Type), UserAgent: fb.UserAgent,
	}
	created := false
	err := a.Store.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		at := time.Now().UTC().Truncate(time.Microsecond)
		eventID := store.EmailEventIDPrefix(email.ID) + strconv.Itoa(r.Position) + ":complaint"
		var err error
		created, err = emailevent.Record(ctx, tx, email.Email, email.domain, eventID, eventtype.Complained, store.StatComplained, r.Address, at, data)
		if err != nil || !created {
			return err
		}
		return store.Suppress(ctx, tx, email.OrganizationID, r.Address, store.SuppressionComplaint)
	})
	if created {
		return 1, err
	}
	return 0, err
}

// reportedEmail finds the email a message concerns: the one whose envelope
// sender received it (the listener checked the tag), else, for a complaint
// sent to the bounce host's fbl@ address, the one whose tagged return path
// the report gives (reportedReturnPaths), else the one whose Message-ID the
// attached original carries (as Mailyard writes it: an email submitted
// over SMTP may carry its client's). Nothing else can name an email, so a
// report never touches another organization's mail.
func (a *Inbound) reportedEmail(ctx context.Context, m *store.InboundMessage, report *bouncereport.Report) (*reportedEmail, error) {
	id, byMessageID := deref(m.EmailID), false
	if id == "" && report.Kind == bouncereport.KindARF {
		for _, path := range reportedReturnPaths(m, report) {
			if rp, ok := a.Tags.Parse(path); ok && rp.Tagged {
				id = rp.EmailID
				break
			}
		}
		if id == "" {
			id, byMessageID = emailIDFromMessageID(report.OriginalMessageID), true
		}
	}
	if id == "" {
		return nil, nil
	}
	e, domain, err := a.Store.EmailEnvelope(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if byMessageID && !strings.EqualFold(messageIDDomain(report.OriginalMessageID), domain) {
		// The Message-ID's id is an email's, but not as Mailyard wrote it.
		return nil, nil
	}
	recipients, err := a.Store.EmailRecipients(ctx, e.ID)
	if err != nil {
		return nil, err
	}
	return &reportedEmail{Email: e, domain: domain, recipients: recipients, reportable: a.reportable(e, m, report, recipients)}, nil
}

// reportable is reportedEmail.reportable for a message about the email e:
// the recipients whose return paths the message was sent to or, for a
// complaint sent to fbl@, the one whose return path the report gives as the
// original's Original-Mail-From or Return-Path (feedback loops keep it, and
// it holds no address to redact). Only a path the email was sent with counts:
// the report's text is the sender's to write. A complaint to fbl@ that gives
// none may concern only an email's only recipient.
func (a *Inbound) reportable(e *store.Email, m *store.InboundMessage, report *bouncereport.Report, recipients []store.EmailRecipient) map[int]bool {
	reportable := map[int]bool{}
	for _, path := range reportedReturnPaths(m, report) {
		rp, ok := a.Tags.Parse(path)
		if !ok || !strings.EqualFold(rp.EmailID, e.ID) || e.EnvelopeSender == nil || !a.Tags.HandedOut(*e.EnvelopeSender, path, rp) {
			continue
		}
		if rp.Recipient == bouncetag.WholeEmail {
			return nil
		}
		reportable[rp.Recipient] = true
		if m.EmailID == nil {
			// The first return path that names the email is the one.
			break
		}
	}
	if len(reportable) == 0 && len(recipients) == 1 {
		reportable[recipients[0].Position] = true
	}
	return reportable
}

// reportedReturnPaths are the return paths a message about an email came
// with: those it was sent to or, for a complaint sent to fbl@, those the
// report gives for the original (Original-Mail-From, then the original's
// Return-Path), which only the email's own check (Tagger.HandedOut) makes
// trustworthy.
func reportedReturnPaths(m *store.InboundMessage, report *bouncereport.Report) []string {
	if m.EmailID != nil {
		return m.Recipients
	}
	if fb := report.Feedback; fb != nil {
		return []string{fb.OriginalMailFrom, fb.OriginalReturnPath}
	}
	return nil
}

// emailIDFromMessageID returns the email id of a Message-ID Mailyard wrote,
// <email_id@domain>, or "".
func emailIDFromMessageID(messageID string) string {
	local, _, ok := strings.Cut(strings.Trim(strings.TrimSpace(messageID), "<>"), "@")
	if !ok {
		return ""
	}
	id, err := uuid.Parse(local)
	if err != nil || len(local) != 36 {
		return ""
	}
	return id.String()
}

func messageIDDomain(messageID string) string {
	_, domain, _ := strings.Cut(strings.Trim(strings.TrimSpace(messageID), "<>"), "@")
	return domain
}

// findRecipient returns the first of an email's recipients that one of
// addrs names (case-insensitively), or nil.
func findRecipient(recipients []store.EmailRecipient, addrs ...string) *store.EmailRecipient {
	for _, addr := range addrs {
		if addr == "" {
			continue
		}
		for i := range recipients {
			if store.SameAddress(recipients[i].Address, addr) {
				return &recipients[i]
			}
		}
	}
	return nil
}

// toUnsubscribe reports whether the message was sent to an unsubscribe
// address of the bounce host.
func toUnsubscribe(recipients []string) bool {
	for _, r := range recipients {
		if _, ok := bouncetag.UnsubscribeToken(r); ok {
			return true
		}
	}
	return false
}

// settle marks the email sent once every recipient is final and starts the
// webhook deliveries of its events.
func (a *Inbound) settle(ctx context.Context, emailID string) error {
	return emailevent.Settle(ctx, a.Store, a.Runs, emailID)
}

// EraseMessage erases a message's bytes once the retention time is over
// (for runs started before close-when-handled; newer messages are erased by
// the retention sweep).
func (a *Inbound) EraseMessage(ctx context.Context, in inbound.EraseInput) error {
	return a.Store.EraseInboundMessage(ctx, in.InboundID)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
