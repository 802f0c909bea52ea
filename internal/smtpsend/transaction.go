package smtpsend

import (
	"bytes"
	"context"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-smtp"
)

// quitTimeout bounds the wait for the reply to QUIT: the mail is settled by
// then, and a server slow to say goodbye must not hold the attempt.
const quitTimeout = 10 * time.Second

// sessionState is what a transaction leaves of its session.
type sessionState int

const (
	// sessionOpen: ready for the next transaction.
	sessionOpen sessionState = iota
	// sessionLost: closed or unusable; the transaction's outcomes say
	// what became of its recipients.
	sessionLost
	// sessionLostBeforeMail: lost before the server took the
	// transaction's MAIL FROM (the connection was gone, or the server
	// answered 421): nothing of the transaction began.
	sessionLostBeforeMail
)

// transact runs one mail transaction. It returns one outcome per
// recipient, and whether the session can carry another: MAIL FROM and DATA
// answers apply to all the recipients they concern, RCPT TO answers to
// one; only recipients accepted at RCPT TO get the DATA answer.
func (s *session) transact(ctx context.Context, from string, rcpts []string, msg []byte) ([]outcome, sessionState) {
	out := make([]outcome, len(rcpts))
	set := func(indices []int, o outcome) {
		for _, i := range indices {
			out[i] = o
		}
	}
	all := make([]int, len(rcpts))
	for i := range all {
		all[i] = i
	}

	opts := &smtp.MailOptions{Size: int64(len(msg))}
	if !isASCII(from) || !allASCII(rcpts) {
		if ok, _ := s.client.Extension("SMTPUTF8"); !ok {
			return same(len(rcpts), outcome{status: HardBounce, code: codeInvalidAddress,
				message: "the server does not accept internationalized addresses (no SMTPUTF8)"}), sessionOpen
		}
		opts.UTF8 = true
	} else if !headerIsASCII(msg) {
		// A message with UTF-8 header fields (one submitted with SMTPUTF8)
		// is announced as such where the server takes it (RFC 6531 §3.4).
		// Where it does not, it goes as it is, as Postfix sends it: the
		// addresses need nothing, and a reader still reads the fields.
		opts.UTF8, _ = s.client.Extension("SMTPUTF8")
	}
	if err := s.client.Mail(from, opts); err != nil {
		state := s.afterRefusal(err)
		if state == sessionLost {
			state = sessionLostBeforeMail
		}
		o := failureOutcome(ctx, s.where, "MAIL FROM", err)
		if o.code == codeSessionPolicy {
			// "530 Must issue a STARTTLS command first" (RFC 3207), or
			// authentication required (RFC 4954): the server refuses this
			// session, typically one in clear after a TLS handshake that
			// failed, and says nothing of the recipients. Bounced, they
			// would be suppressed for good.
			o.status = Deferred
		}
		return same(len(rcpts), o), state
	}

	var accepted []int
	for i, rcpt := range rcpts {
		err := s.client.Rcpt(rcpt, nil)
		if err == nil {
			accepted = append(accepted, i)
			continue
		}
		if code, text, ok := serverReply(err); ok {
			out[i] = replyOutcome(code, text)
			continue
		}
		// The connection broke: nobody got the message.
		set(append(accepted, all[i:]...), deferred("%s", describe(ctx, s.where, "RCPT TO", err)))
		return out, sessionLost
	}
	if len(accepted) == 0 {
		return out, s.reset()
	}

	data, err := s.client.Data()
	if err != nil {
		set(accepted, failureOutcome(ctx, s.where, "DATA", err))
		return out, s.afterRefusal(err)
	}
	// go-smtp sets no deadline for writing the message itself.
	_ = s.conn.SetDeadline(time.Now().Add(s.dataTimeout))
	if _, err := data.Write(msg); err != nil {
		set(accepted, deferred("%s", describe(ctx, s.where, "sending the message", err)))
		return out, sessionLost
	}
	reply, err := data.CloseWithResponse()
	if err != nil {
		code, text, ok := serverReply(err)
		if ok && code/100 == 2 {
			// go-smtp wants exactly 250; any 2xx means accepted.
			set(accepted, outcome{status: Delivered, code: code, message: text})
		} else {
			set(accepted, failureOutcome(ctx, s.where, "end of data", err))
		}
		if !ok || code == 421 {
			return out, sessionLost
		}
		return out, sessionOpen
	}
	set(accepted, outcome{status: Delivered, code: 250, message: reply.StatusText})
	return out, sessionOpen
}

// afterRefusal is the session after a command that failed with err: a
// reply other than 421 leaves the server waiting for a new transaction once
// this one is reset; anything else ends the session.
func (s *session) afterRefusal(err error) sessionState {
	if code, _, ok := serverReply(err); !ok || code == 421 {
		return sessionLost
	}
	return s.reset()
}

// reset abandons the transaction under way (RSET) so the session can carry
// another.
func (s *session) reset() sessionState {
	if err := s.client.Reset(); err != nil {
		return sessionLost
	}
	return sessionOpen
}

// quit ends the session politely; the reply does not matter.
func (s *session) quit() {
	s.client.CommandTimeout = min(s.client.CommandTimeout, quitTimeout)
	_ = s.client.Quit()
}

func (s *session) close() {
	s.stop()
	_ = s.client.Close()
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// headerIsASCII reports whether msg's header section (up to the first
// empty line) is ASCII. It reads the bytes in place: a message is up to
// 10 MiB, and every transaction asks.
func headerIsASCII(msg []byte) bool {
	header := msg
	if end := bytes.Index(msg, []byte("\r\n\r\n")); end >= 0 {
		header = msg[:end]
	}
	return !slices.ContainsFunc(header, func(c byte) bool { return c >= utf8.RuneSelf })
}

func allASCII(ss []string) bool {
	for _, s := range ss {
		if !isASCII(s) {
			return false
		}
	}
	return true
}
