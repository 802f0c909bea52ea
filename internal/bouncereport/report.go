package bouncereport

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/textproto"
	"strings"
)

// Kind is what a message at the bounce host is, decided in the order the
// constants are listed: a message that is several things is the first.
type Kind string

const (
	// KindDSN is a delivery status notification: a top-level
	// multipart/report; report-type=delivery-status with at least one
	// per-recipient block (RFC 3464).
	KindDSN Kind = "dsn"
	// KindARF is a feedback-loop complaint: a top-level multipart/report;
	// report-type=feedback-report with a message/feedback-report part
	// (RFC 5965).
	KindARF Kind = "arf"
	// KindAutoReply is an automatic reply (RFC 3834 Auto-Submitted other
	// than "no", X-Autoreply, X-Autorespond or Precedence: auto_reply).
	// It comes after the reports because most DSNs carry Auto-Submitted.
	KindAutoReply Kind = "auto_reply"
	// KindLegacyBounce is a non-standard bounce: sent from the null sender,
	// not a report, and its text names addresses beside 5.x.x status codes.
	// The caller must still check Report.LegacyRecipient.
	KindLegacyBounce Kind = "legacy_bounce"
	// KindUnsubscribe is mail to an unsubscribe+<token> address that is
	// none of the above.
	KindUnsubscribe Kind = "unsubscribe"
	// KindUnrecognized is everything else, including what cannot be parsed.
	KindUnrecognized Kind = "unrecognized"
)

// Envelope is what the SMTP transaction, not the message, says.
type Envelope struct {
	// NullSender is true when MAIL FROM was the null path <>, as for
	// bounces (RFC 5321 §4.5.5).
	NullSender bool
	// Unsubscribe is true when the message was addressed to an
	// unsubscribe+<token> address.
	Unsubscribe bool
}

// Report is what Parse found in one message. Only the fields of its Kind are
// set, apart from MessageID.
type Report struct {
	Kind Kind
	// MessageID is the message's own Message-ID without angle brackets,
	// for de-duplicating redelivered reports; "" if it has none.
	MessageID string
	// OriginalMessageID is the Message-ID, without angle brackets, of the
	// original message a dsn or arf includes (message/rfc822 or
	// text/rfc822-headers part); "" if none.
	OriginalMessageID string
	// Recipients are a dsn's per-recipient blocks, in order, at most 100
	// of them.
	Recipients []DSNRecipient
	// Feedback is an arf's feedback report.
	Feedback *Feedback
	// Legacy are a legacy_bounce's candidate findings; see LegacyRecipient.
	Legacy []LegacyFinding
}

// Limits on what Parse examines, so that hostile input costs linear time and
// bounded memory. Input beyond them is ignored, not an error.
const (
	// maxParts is the number of MIME parts examined in the whole message.
	maxParts = 100
	// maxDepth is how many multipart levels are entered, the top one included.
	maxDepth = 3
	// maxPartBytes is how much of a report part (delivery-status,
	// feedback-report, the original's headers) is read, after decoding.
	maxPartBytes = 256 << 10
	// maxTextBytes is how much decoded text a legacy bounce is searched in.
	maxTextBytes = 64 << 10
	// maxRecipients is the number of DSN per-recipient blocks returned,
	// and of Original-Rcpt-To addresses and legacy findings.
	maxRecipients = 100
	// maxBlocks is the number of header blocks of a delivery-status part
	// parsed, so that many tiny empty blocks cannot cost more than useful ones.
	maxBlocks = 2*maxRecipients + 1
	// maxFieldBytes is the length a field's value is cut to: twice the
	// longest SMTP reply line (RFC 5321 §4.5.3.1.5).
	maxFieldBytes = 1024
	// maxHeaderBytes is the longest top-level header read. net/mail reads
	// a header whole, into a map of every field: 10 MiB of one-line fields
	// cost 30 times that in allocations. No mail system's report has a
	// header near this size.
	maxHeaderBytes = 256 << 10
)

// Parse classifies a raw message received at the bounce host and extracts
// the facts of its kind. It never fails and never panics: a message it cannot
// understand is KindUnrecognized.
func Parse(raw []byte, env Envelope) (r *Report) {
	defer func() {
		// A bug here must not take the caller's workflow down with it; the
		// fuzz tests call parse directly so that such bugs still show.
		if recover() != nil {
			r = &Report{Kind: KindUnrecognized}
		}
	}()
	return parse(raw, env)
}

func parse(raw []byte, env Envelope) *Report {
	r := &Report{Kind: KindUnrecognized}
	msg, err := readMessage(raw)
	if err != nil {
		// Without a header there is nothing to classify by, but mail to an
		// unsubscribe address asks to unsubscribe whatever it holds (an
		// empty message included).
		if asksToUnsubscribe(env) {
			r.Kind = KindUnsubscribe
		}
		return r
	}
	h := msg.Header
	r.MessageID = stripAngles(h.Get("Message-Id"))

	mediaType, params, _ := mime.ParseMediaType(h.Get("Content-Type"))
	report := mediaType == "multipart/report"
	if report && params["boundary"] != "" {
		// Only the top-level report type counts: a report attached inside
		// another message is that message's content, not a report to us.
		switch strings.ToLower(strings.TrimSpace(params["report-type"])) {
		case "delivery-status":
			readReport(r, msg.Body, params["boundary"], true)
			if len(r.Recipients) > 0 {
				r.Kind = KindDSN
				return r
			}
		case "feedback-report":
			readReport(r, msg.Body, params["boundary"], false)
			if r.Feedback != nil {
				r.Kind = KindARF
				return r
			}
		}
		r.OriginalMessageID, r.Recipients, r.Feedback = "", nil, nil
	}

	if isAutoReply(h) {
		r.Kind = KindAutoReply
		return r
	}
	if env.NullSender && fromMailSystem(h) {
		// The body may have been consumed by readReport; read it afresh.
		if again, err := readMessage(raw); err == nil {
			r.Legacy = legacyFindings(bodyText(again.Header, again.Body))
		}
		if len(r.Legacy) > 0 {
			r.Kind = KindLegacyBounce
			return r
		}
	}
	if asksToUnsubscribe(env) && !report {
		r.Kind = KindUnsubscribe
	}
	return r
}

// asksToUnsubscribe says whether mail to an unsubscribe address asks to
// unsubscribe, as far as its envelope tells: a person's mail client (or a
// mailbox provider acting for the person) sends from the person's address,
// while bounces and automatic replies come from the null sender (RFC 3834
// §3.3). A report that could not be read is a mail system's too.
func asksToUnsubscribe(env Envelope) bool { return env.Unsubscribe && !env.NullSender }

// errHeaderTooLong refuses a header past maxHeaderBytes.
var errHeaderTooLong = errors.New("header too long")

// readMessage is mail.ReadMessage for a header of at most maxHeaderBytes.
func readMessage(raw []byte) (*mail.Message, error) {
	head := raw[:min(len(raw), maxHeaderBytes)]
	if len(raw) > maxHeaderBytes && !bytes.Contains(head, []byte("\n\n")) && !bytes.Contains(head, []byte("\n\r\n")) {
		return nil, errHeaderTooLong
	}
	return mail.ReadMessage(bytes.NewReader(raw))
}

// fromMailSystem reports whether a message without a report's structure
// reads as a mail system's bounce: sent by MAILER-DAEMON or postmaster, or
// under a subject that says delivery failed. Only then are the addresses
// beside 5.x.x codes in its text taken for failed recipients: an
// out-of-office reply from the null sender (as RFC 3834 asks) that says
// "away until 5.1.25" beside its author's address is not a bounce.
func fromMailSystem(h mail.Header) bool {
	if from, err := mail.ParseAddress(h.Get("From")); err == nil {
		local, _, _ := strings.Cut(strings.ToLower(from.Address), "@")
		if local == "mailer-daemon" || local == "postmaster" || local == "mail-daemon" {
			return true
		}
	}
	subject := strings.ToLower(h.Get("Subject"))
	for _, s := range bounceSubjects {
		if strings.Contains(subject, s) {
			return true
		}
	}
	return false
}

// bounceSubjects are words of the subjects mail systems give their bounces.
var bounceSubjects = []string{
	"undeliver", "non-deliver", "nondeliver", "delivery status notification",
	"delivery failure", "delivery failed", "failure notice", "returned mail", "returned to sender",
	"could not be delivered", "not delivered", "delivery has failed", "delivery problem",
}

// isAutoReply reports whether the header marks an automatic reply. An empty
// Auto-Submitted counts: only "no" says a human wrote the message (RFC 3834
// §5), and a broken header is more likely from software than from a person.
func isAutoReply(h mail.Header) bool {
	if v, ok := h["Auto-Submitted"]; ok && len(v) > 0 {
		value, _, _ := strings.Cut(v[0], ";")
		if !strings.EqualFold(strings.TrimSpace(value), "no") {
			return true
		}
	}
	if _, ok := h["X-Autoreply"]; ok {
		return true
	}
	if _, ok := h["X-Autorespond"]; ok {
		return true
	}
	return strings.EqualFold(strings.TrimSpace(h.Get("Precedence")), "auto_reply")
}

// readReport reads the direct children of a top-level multipart/report:
// the delivery-status (dsn) or feedback-report (arf) part and the original
// message. Nested multiparts (a human-readable multipart/alternative) are
// skipped unread; a report inside the original is never looked at.
func readReport(r *Report, body io.Reader, boundary string, dsn bool) {
	var haveStatus bool
	var original textproto.MIMEHeader
	parts := multipart.NewReader(body, boundary)
	for range maxParts {
		p, err := parts.NextPart()
		if err != nil {
			// The end, or a truncated or broken message: keep what was read.
			break
		}
		mediaType, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		switch mediaType {
		case "message/delivery-status", "message/global-delivery-status":
			if dsn && !haveStatus {
				haveStatus = true
				r.Recipients = parseDeliveryStatus(readPart(p, maxPartBytes))
			}
		case "message/feedback-report":
			if !dsn && r.Feedback == nil {
				r.Feedback = parseFeedback(readPart(p, maxPartBytes))
			}
		case "message/rfc822", "text/rfc822-headers", "message/rfc822-headers",
			"message/global", "message/global-headers":
			if original == nil {
				original = readHeader(readPart(p, maxPartBytes))
			}
		}
	}
	if original == nil {
		return
	}
	r.OriginalMessageID = stripAngles(original.Get("Message-Id"))
	if r.Feedback != nil {
		r.Feedback.OriginalReturnPath = stripAngles(original.Get("Return-Path"))
		r.Feedback.OriginalFrom = clean(original.Get("From"))
		r.Feedback.OriginalTo = clean(original.Get("To"))
	}
}
