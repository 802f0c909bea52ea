package smtpserver

import (
	"bytes"
	"errors"
	"io"
	"net"

	"github.com/emersion/go-smtp"
)

// ErrBareLineEnding is ReadMessage's answer to a message with a <CR> not
// followed by <LF>, or an <LF> not preceded by <CR>. RFC 5321 section 2.3.8
// forbids both; they are refused rather than repaired because they are how
// SMTP smuggling hides a second message (<LF>.<LF>, <LF>.<CR><LF>,
// <CR>.<CR>) from one server that a later server would split off.
var ErrBareLineEnding = &smtp.SMTPError{
	Code:         550,
	EnhancedCode: smtp.EnhancedCode{5, 6, 0},
	Message:      "Bare <CR> or <LF> in message, use <CR><LF> line endings",
}

// ErrMessageTimeout is ReadMessage's answer to a message that stopped
// arriving (the idle time-out) or ran past the session's end: a temporary
// failure, so the client sends it again later. go-smtp would answer the
// read error with a permanent 554, and the sender would bounce a message
// that only came too slowly.
var ErrMessageTimeout = &smtp.SMTPError{
	Code:         451,
	EnhancedCode: smtp.EnhancedCode{4, 4, 2},
	Message:      "Timed out receiving the message, try again later",
}

// ReadMessage reads a whole message from the reader a Session's Data gets
// (DATA or BDAT) and returns it, and every Session's Data must use it rather
// than read r itself. It returns ErrBareLineEnding if the message holds a
// bare <CR> or <LF>; it then reads on to the end without keeping anything,
// so the client's reply waits for the whole message. Any other error of r
// (go-smtp's smtp.ErrDataTooLarge, a connection that broke off) is returned
// as it is, with no message: nothing may be stored then; a read that timed
// out is ErrMessageTimeout.
//
// The size limit is go-smtp's (Config.MaxMessageBytes); go-smtp has already
// removed the dot-stuffing of DATA and recognises only <CRLF>.<CRLF> as its
// end.
func ReadMessage(r io.Reader) ([]byte, error) {
	var (
		msg    bytes.Buffer
		buf    = make([]byte, 32<<10)
		prevCR bool // the last byte seen was <CR>
	)
	for {
		n, err := r.Read(buf)
		if bare(buf[:n], &prevCR) {
			return nil, discard(r)
		}
		msg.Write(buf[:n])
		if err == io.EOF {
			if prevCR { // ends in a <CR> that no <LF> follows (BDAT only)
				return nil, ErrBareLineEnding
			}
			if msg.Len() == 0 {
				// An empty message (DATA then ".", or BDAT 0 LAST) is
				// returned empty, not nil: nil would be stored as NULL,
				// what an erased message's bytes are.
				return []byte{}, nil
			}
			return msg.Bytes(), nil
		}
		if err != nil {
			return nil, readError(err)
		}
	}
}

// readError is the answer to a read of the message that failed: a time-out
// (the idle limit, the session's end) is ErrMessageTimeout, which the client
// retries, rather than net's own text, which go-smtp would send as a
// permanent 554 naming the server's socket.
func readError(err error) error {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return ErrMessageTimeout
	}
	return err
}

// bare reports whether b holds a bare <CR> or <LF>, given whether the byte
// before b was <CR>, and updates that for the next call.
func bare(b []byte, prevCR *bool) bool {
	for _, c := range b {
		switch {
		case *prevCR && c != '\n':
			return true
		case c == '\n' && !*prevCR:
			return true
		}
		*prevCR = c == '\r'
	}
	return false
}

// discard reads r to its end after a bare line ending. The answer stays
// ErrBareLineEnding even if the message also turns out too large; a broken
// connection or a time-out wins, since then no answer reaches the client, or
// the client is told to send it again.
func discard(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	var smtpErr *smtp.SMTPError
	if err != nil && !errors.As(err, &smtpErr) {
		return readError(err)
	}
	return ErrBareLineEnding
}
