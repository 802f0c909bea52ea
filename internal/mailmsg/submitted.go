package mailmsg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/mail"
	"net/textproto"
	"strings"
	"time"
	"unicode/utf8"
)

// Submitted is what Mailyard reads of a message an application hands over
// by SMTP (docs/submission.md): the addresses and subject shown by the
// API, and the Message-ID it carries.
type Submitted struct {
	From    mail.Address
	To, Cc  []string
	Subject string
	// MessageID is the Message-ID field as the message carries it (the
	// client's, or the one Mailyard added).
	MessageID string
	// ClientMessageID says whether the client wrote it.
	ClientMessageID bool
}

// Problems of a submitted message; the SMTP server answers each with its
// own reply (docs/submission.md).
var (
	ErrNoHeader = errors.New("the message has no header section")
	// ErrBadHeader is a header section net/textproto cannot read (a line
	// without a colon, a raw control character in a field).
	ErrBadHeader   = errors.New("the message header cannot be read")
	ErrFromMissing = errors.New("the message must have exactly one From address")
	ErrFromDomain  = errors.New("the From address is not at the credential's domain")
	ErrNonASCII    = errors.New("8-bit header fields need SMTPUTF8")
	// ErrControl is a Subject or From display name that decodes (RFC 2047)
	// to a control character: see hasHeaderControl.
	ErrControl = errors.New("the Subject or the From display name has a control character")
	// ErrLongLine is a line of more than maxLine octets. RFC 5322
	// §2.1.1 forbids it; relays on the way wrap or refuse such lines, and a
	// wrapped line breaks the DKIM signature Mailyard adds.
	ErrLongLine = errors.New("a line of the message is longer than 998 characters")
	// ErrManyFields is a header section of more than maxHeaderFields
	// fields: each is a map entry while the message is read and signed, so
	// a 10 MiB header of short fields would cost hundreds of megabytes.
	ErrManyFields = fmt.Errorf("the message header has more than %d fields", maxHeaderFields)
)

// maxHeaderFields bounds the fields of a submitted message's header; real
// messages have tens (Received fields included).
const maxHeaderFields = 1000

// RepeatedFieldError is a header field that may appear once (RFC 5322
// §3.6), given twice.
type RepeatedFieldError struct{ Field string }

func (e *RepeatedFieldError) Error() string {
	return "the message has more than one " + e.Field + " field"
}

// onceFields may appear at most once in a message (RFC 5322 §3.6), in
// net/textproto's spelling. A second From matters most: the From check
// reads the first, the DKIM signature covers both, and a receiver or a mail
// reader that shows the second shows a sender the check never saw. The
// others would do the same to the Subject, the date or the replies.
var onceFields = []string{"From", "Sender", "Reply-To", "To", "Cc", "Subject", "Date", "Message-Id", "In-Reply-To", "References"}

// PrepareSubmitted takes a message as its sender wrote it and returns the
// bytes Mailyard signs and sends: the same header fields and body bytes,
// with any Bcc field removed and Date and Message-ID (<emailID@domain>)
// added at the top when missing. The fields of onceFields must appear at
// most once (a RepeatedFieldError). The From address must be at domain or a
// subdomain of it, and its display name and the Subject must not decode to
// a control character (ErrControl). utf8 says whether the client declared
// SMTPUTF8; without it, header fields must be ASCII. No line may be longer
// than maxLine (ErrLongLine).
func PrepareSubmitted(raw []byte, emailID, domain string, now time.Time, utf8 bool) ([]byte, Submitted, error) {
	var info Submitted
	if hasLongLine(raw) {
		return nil, info, ErrLongLine
	}
	end := bytes.Index(raw, []byte("\r\n\r\n"))
	if end < 0 {
		if !bytes.HasSuffix(raw, []byte("\r\n")) {
			return nil, info, ErrNoHeader
		}
		end = len(raw) - 2 // a message with no body
	}
	head := raw[:end+2]
	if !utf8 && !isASCII(string(head)) {
		return nil, info, ErrNonASCII
	}
	if fieldCount(head) > maxHeaderFields {
		return nil, info, ErrManyFields
	}
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(head[:len(head):len(head)], '\r', '\n')))).ReadMIMEHeader()
	if err != nil {
		return nil, info, fmt.Errorf("%w: %v", ErrBadHeader, err)
	}
	for name := range h {
		// net/textproto keeps "From : x" apart, under "From ": a second
		// From (or Subject, To...) that the checks below would not see,
		// while receivers read it as one (RFC 5322's obsolete syntax
		// allows the space) and DKIM signs it as one.
		if strings.ContainsAny(name, " \t") {
			return nil, info, fmt.Errorf("%w: white space before the colon of field %q", ErrBadHeader, strings.TrimSpace(name))
		}
	}
	for _, name := range onceFields {
		if len(h[name]) > 1 {
			return nil, info, &RepeatedFieldError{Field: name}
		}
	}
	mh := mail.Header(h)
	froms, err := mh.AddressList("From")
	if err != nil || len(froms) != 1 {
		return nil, info, ErrFromMissing
	}
	info.From = *froms[0]
	if !underDomain(strings.ToLower(domainOf(info.From.Address)), domain) {
		return nil, info, ErrFromDomain
	}
	if hasHeaderControl(info.From.Name) {
		return nil, info, ErrControl
	}
	info.From.Name = shown(info.From.Name)
	info.To, info.Cc = displayList(mh, "To"), displayList(mh, "Cc")
	info.Subject = mh.Get("Subject")
	if dec, err := new(mime.WordDecoder).DecodeHeader(info.Subject); err == nil {
		info.Subject = dec
	}
	if hasHeaderControl(info.Subject) {
		return nil, info, ErrControl
	}
	info.Subject = shown(info.Subject)

	var added bytes.Buffer
	if mh.Get("Date") == "" {
		added.WriteString("Date: " + now.UTC().Format(time.RFC1123Z) + "\r\n")
	}
	info.MessageID = shown(strings.TrimSpace(mh.Get("Message-ID")))
	info.ClientMessageID = info.MessageID != ""
	if !info.ClientMessageID {
		info.MessageID = "<" + emailID + "@" + domain + ">"
		added.WriteString("Message-ID: " + info.MessageID + "\r\n")
	}
	out := make([]byte, 0, len(raw)+added.Len())
	out = append(out, added.Bytes()...)
	out = append(out, withoutField(head, "Bcc")...)
	out = append(out, raw[len(head):]...)
	return out, info, nil
}

// withoutField returns a header section without the fields called name
// (with their continuation lines); every other byte is kept as it was.
func withoutField(head []byte, name string) []byte {
	var out []byte
	skipping := false
	for line := range bytes.Lines(head) {
		folded := len(line) > 0 && (line[0] == ' ' || line[0] == '\t')
		if !folded {
			field, _, ok := bytes.Cut(line, []byte(":"))
			skipping = ok && strings.EqualFold(strings.TrimSpace(string(field)), name)
		}
		if !skipping {
			out = append(out, line...)
		}
	}
	return out
}

// hasHeaderControl reports whether s, a decoded header text, has a character
// that a header field cannot carry written out: a C0 control other than TAB,
// or DEL (RFC 5322 §2.2; net/textproto refuses such a raw byte, and so the
// message, already). Encoded words decode to any character, NUL included,
// which PostgreSQL cannot store: accepting one would answer 451 on every
// retry. The API refuses these too; it also refuses TAB and C1 controls, which
// are let through here: TAB is whitespace a header may hold, and Windows-1252
// text labelled ISO-8859-1, a common mistake, decodes its quotes and dashes
// to C1 controls.
func hasHeaderControl(s string) bool {
	return strings.ContainsFunc(s, isHeaderControl)
}

// shown is a header value as the API shows it and events and webhooks carry
// it; the message goes out as written whatever it holds. Invalid UTF-8,
// which encoded words decode to as they are (=?UTF-8?Q?caf=E9?=) and
// SMTPUTF8 lets through raw, becomes U+FFFD here, as storing it would
// change it anyway, so what is kept is what the caller saw. A value longer
// than MaxSubject characters (the API's limit on a subject) is cut there: a
// folded Subject of megabytes would be copied into every event and webhook
// of the email.
func shown(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= MaxSubject {
		return s
	}
	return string([]rune(s)[:MaxSubject])
}

// isHeaderControl is a character hasHeaderControl looks for.
func isHeaderControl(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }

// displayList is the To or Cc field's addresses as the API shows them. The
// message goes out as written whatever they hold; only the list shown is
// mended: invalid UTF-8 in the field (with SMTPUTF8), which would make the
// whole list unreadable and every recipient look like a Bcc, and control
// characters that encoded words decode to, a NUL above all, become U+FFFD.
func displayList(h mail.Header, name string) []string {
	list, err := mail.ParseAddressList(strings.ToValidUTF8(h.Get(name), "\uFFFD"))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, a := range list {
		// An encoded word may decode to invalid UTF-8 too.
		a.Name = strings.Map(func(r rune) rune {
			if isHeaderControl(r) {
				return utf8.RuneError
			}
			return r
		}, shown(a.Name))
		out = append(out, displayAddress(*a))
	}
	return out
}

func displayAddress(a mail.Address) string {
	if a.Name == "" {
		return a.Address
	}
	return a.Name + " <" + a.Address + ">"
}

// fieldCount is how many fields a header section has: its lines that do
// not continue the one before.
func fieldCount(head []byte) int {
	n := 0
	for line := range bytes.Lines(head) {
		if line[0] != ' ' && line[0] != '\t' {
			n++
		}
	}
	return n
}

// hasLongLine says whether raw (CRLF lines, as an SMTP server hands it
// over) has a line longer than maxLine, its CRLF not counted.
func hasLongLine(raw []byte) bool {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return len(raw) > maxLine
		}
		line := raw[:i]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) > maxLine {
			return true
		}
		raw = raw[i+1:]
	}
	return false
}
