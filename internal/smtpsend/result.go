package smtpsend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/textproto"

	"github.com/emersion/go-smtp"

	"github.com/mailyard/mailyard/internal/egress"
	"github.com/mailyard/mailyard/internal/textclean"
)

// Status is the outcome of one attempt for one recipient.
type Status int

const (
	// Delivered: the server took responsibility for the message (2xx).
	Delivered Status = iota + 1
	// Deferred: try again later (4xx, time-out, connection failure, DNS
	// failure, TLS required but unavailable).
	Deferred
	// HardBounce: the message will never be delivered to this recipient
	// (5xx, null MX, a domain without any mail host).
	HardBounce
)

func (s Status) String() string {
	switch s {
	case Delivered:
		return "delivered"
	case Deferred:
		return "deferred"
	case HardBounce:
		return "hard_bounce"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Result is the outcome for one recipient.
type Result struct {
	Recipient string
	Status    Status
	// Code is the server's reply code, or the code RFC 7505 prescribes for
	// a null MX (556), 550 for a domain without any mail host, 553 for an
	// address that cannot be sent to; 0 when no server answered
	// (connection failure, time-out, refused destination, DNS failure).
	Code int
	// Message is the server's reply text (with its enhanced status code)
	// or our description of what went wrong, at most MaxMessageLen bytes.
	// A server's text may quote the recipient's address; it never holds
	// the message itself.
	Message string
}

// MaxMessageLen bounds Result.Message.
const MaxMessageLen = 512

// Codes we give when no server replied but the outcome is final.
const (
	codeNullMX         = 556 // RFC 7505 §3
	codeNoMailHost     = 550
	codeInvalidAddress = 553
)

// outcome is a Result without its recipient.
type outcome struct {
	status  Status
	code    int
	message string
}

func (o outcome) result(rcpt string) Result {
	return Result{Recipient: rcpt, Status: o.status, Code: o.code, Message: truncate(o.message)}
}

func deferred(format string, args ...any) outcome {
	return outcome{status: Deferred, message: fmt.Sprintf(format, args...)}
}

// codeSessionPolicy is the reply of a server that refuses the session
// itself until it has TLS or authentication (RFC 3207, RFC 4954).
const codeSessionPolicy = 530

// replyOutcome classifies a server's reply to a command of the mail
// transaction (MAIL, RCPT, DATA and the end of data): 5xx is final, any
// other refusal is worth another try.
func replyOutcome(code int, text string) outcome {
	if code/100 == 5 {
		return outcome{status: HardBounce, code: code, message: text}
	}
	return outcome{status: Deferred, code: code, message: text}
}

// failureOutcome classifies an error of the transaction phase: a reply the
// command did not want, or a broken connection.
func failureOutcome(ctx context.Context, where, step string, err error) outcome {
	if code, text, ok := serverReply(err); ok {
		return replyOutcome(code, text)
	}
	return deferred("%s", describe(ctx, where, step, err))
}

// serverReply extracts the reply from an error that is one.
func serverReply(err error) (code int, text string, ok bool) {
	var smtpErr *smtp.SMTPError
	if errors.As(err, &smtpErr) {
		text := smtpErr.Message
		// go-smtp splits the enhanced status code off; it is part of what
		// the server said and says more than the basic code.
		if e := smtpErr.EnhancedCode; e[0] > 0 {
			text = fmt.Sprintf("%d.%d.%d %s", e[0], e[1], e[2], text)
		}
		return smtpErr.Code, text, true
	}
	var protoErr *textproto.Error
	if errors.As(err, &protoErr) {
		return protoErr.Code, protoErr.Msg, true
	}
	return 0, "", false
}

// describe says what went wrong at step with the server at where, for
// failures without a reply.
func describe(ctx context.Context, where, step string, err error) string {
	prefix := where + ": " + step + ": "
	if ctx.Err() != nil {
		// The connection was closed under the command because the
		// attempt's time was up; its own error would only say "use of
		// closed network connection".
		return prefix + "the delivery attempt ran out of time (" + context.Cause(ctx).Error() + ")"
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return prefix + "no reply in time"
	}
	// where already names the server.
	return prefix + egress.Describe(err)
}

// truncate keeps Message one line of at most MaxMessageLen bytes of valid
// UTF-8 without control characters, so a chatty or hostile server can
// neither bloat what callers store nor make it unstorable.
func truncate(s string) string {
	return textclean.Line(s, MaxMessageLen)
}
