package mailmsg

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// maxLine is the longest line RFC 5322 §2.1.1 allows, without its CRLF.
	maxLine = 998
	// foldAt is the line length RFC 5322 §2.1.1 recommends; header fields
	// are folded to it where they have whitespace.
	foldAt = 78
	// longWord is the longest whitespace-free run of printable ASCII written
	// as is in a subject or display name; longer ones are written as encoded
	// words, which can be folded.
	longWord = 70
	// base64Line is the line length of base64 bodies (RFC 2045 §6.8).
	base64Line = 76
)

// Build renders m as an RFC 5322 message: the header fields Date,
// Message-ID (<emailID@domain>), From, To, Cc, Reply-To, Subject,
// MIME-Version, the customer's extra headers, then the MIME body — text and
// html as multipart/alternative, inside multipart/mixed with the attachments
// when there are any. Bcc is never written: those recipients are on the
// envelope only (Message.Recipients).
//
// The result is 7-bit ASCII with CRLF line endings and no line over 998
// characters: non-ASCII header text is RFC 2047 encoded, attachment names are
// RFC 2231 encoded, text parts are quoted-printable and attachments base64.
// Build renders once; multipart boundaries are random, so a second call gives
// other bytes (and, once signed, another signature).
func Build(m *Message, emailID, domain string, date time.Time) ([]byte, error) {
	if m == nil {
		return nil, errors.New("mailmsg: no message")
	}
	if !isDotAtom(emailID) {
		return nil, fmt.Errorf("mailmsg: the email id %q cannot be the left part of a Message-ID", emailID)
	}
	if !isDotAtom(domain) {
		return nil, fmt.Errorf("mailmsg: the domain %q cannot be the right part of a Message-ID", domain)
	}
	// RFC 5322 §3.3: a four-digit year from 1900.
	if y := date.Year(); y < 1900 || y > 9999 {
		return nil, fmt.Errorf("mailmsg: the date's year %d cannot be written in a Date header", y)
	}
	if err := checkMessage(m); err != nil {
		return nil, err
	}

	fields := []field{
		{"Date", date.Format(time.RFC1123Z)},
		{"Message-ID", "<" + emailID + "@" + domain + ">"},
		{"From", formatAddress(m.From)},
	}
	for _, list := range []struct {
		name  string
		addrs []mail.Address
	}{{"To", m.To}, {"Cc", m.Cc}, {"Reply-To", m.ReplyTo}} {
		if len(list.addrs) > 0 {
			fields = append(fields, field{list.name, formatAddressList(list.addrs)})
		}
	}
	fields = append(fields,
		field{"Subject", encodeText(m.Subject)},
		field{"MIME-Version", "1.0"},
	)
	for _, h := range m.Headers {
		fields = append(fields, field{h.Name, headerValue(h.Name, h.Value)})
	}

	body, err := bodyEntity(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := writeFields(&out, append(fields, body.fields...)); err != nil {
		return nil, err
	}
	out.WriteString("\r\n")
	out.Write(body.body)
	// SMTP needs the data to end with CRLF before its final dot.
	if !bytes.HasSuffix(out.Bytes(), []byte("\r\n")) {
		out.WriteString("\r\n")
	}
	return out.Bytes(), nil
}

// checkMessage repeats, for a Message that did not come from Validate, the
// checks that keep its header text from breaking out of its header.
func checkMessage(m *Message) error {
	addrs := slices.Concat([]mail.Address{m.From}, m.To, m.Cc, m.Bcc, m.ReplyTo)
	for _, a := range addrs {
		if _, err := ParseAddress(formatAddress(a)); err != nil {
			return fmt.Errorf("mailmsg: an address of the message is invalid: %w", err)
		}
	}
	if m.Text == "" && m.HTML == "" {
		return errors.New("mailmsg: the message has neither text nor html")
	}
	if hasControl(m.Subject) || !utf8.ValidString(m.Subject) {
		return errors.New("mailmsg: the subject contains a control character")
	}
	for _, h := range m.Headers {
		if _, err := headerName(h.Name); err != nil {
			return fmt.Errorf("mailmsg: header %q: %w", h.Name, err)
		}
		if err := checkHeaderValue(h.Name, h.Value); err != nil {
			return fmt.Errorf("mailmsg: header %q: %w", h.Name, err)
		}
	}
	for _, a := range m.Attachments {
		if a.Filename == "" || hasControl(a.Filename) || !utf8.ValidString(a.Filename) {
			return errors.New("mailmsg: an attachment has an empty filename or one with a control character")
		}
	}
	return nil
}

// field is one header field before folding.
type field struct {
	name, value string
}

func writeFields(b *bytes.Buffer, fields []field) error {
	for _, f := range fields {
		folded, err := foldField(f.name, f.value)
		if err != nil {
			return fmt.Errorf("mailmsg: header %s: %w", f.name, err)
		}
		b.WriteString(folded)
	}
	return nil
}

// foldField renders "name: value" as a header field ending in CRLF, folded
// (RFC 5322 §2.2.3: CRLF inserted before a space or tab) so that lines stay
// within foldAt characters where the value's whitespace allows. It never
// folds where a line would hold only whitespace. It fails if the field
// contains anything but printable ASCII, spaces and tabs (so no CR or LF can
// ever get through), or if a line would exceed maxLine.
func foldField(name, value string) (string, error) {
	line := name + ": " + value
	for i := 0; i < len(line); i++ {
		if c := line[i]; (c < ' ' && c != '\t') || c > '~' {
			return "", fmt.Errorf("the field contains the byte %#x, which a header cannot hold", c)
		}
	}
	// Cut before each run of whitespace that has text after it.
	var segments []string
	start := 0
	for i := len(name) + 2; i < len(line); i++ {
		if isWSP(line[i]) && !isWSP(line[i-1]) && strings.TrimLeft(line[i:], " \t") != "" {
			segments = append(segments, line[start:i])
			start = i
		}
	}
	segments = append(segments, line[start:])

	var b strings.Builder
	current := segments[0]
	for _, s := range segments[1:] {
		if len(current)+len(s) <= foldAt {
			current += s
			continue
		}
		if len(current) > maxLine {
			return "", errors.New("a line of the field is longer than 998 characters")
		}
		b.WriteString(current)
		b.WriteString("\r\n")
		current = s
	}
	if len(current) > maxLine {
		return "", errors.New("a line of the field is longer than 998 characters")
	}
	b.WriteString(current)
	b.WriteString("\r\n")
	return b.String(), nil
}

func isWSP(c byte) bool { return c == ' ' || c == '\t' }

// formatAddress writes an address for a header. net/mail quotes ASCII names
// and RFC 2047 encodes the others; an ASCII name that looks like an encoded
// word, or has a word too long to fold, is encoded too, so that receivers
// show it as written and no line grows past the limit.
func formatAddress(a mail.Address) string {
	if a.Name != "" && isPrintableASCII(a.Name) && needsForcedEncoding(a.Name) {
		return encodeWordsB(a.Name) + " " + (&mail.Address{Address: a.Address}).String()
	}
	return a.String()
}

func formatAddressList(addrs []mail.Address) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = formatAddress(a)
	}
	return strings.Join(parts, ", ")
}

// encodeText encodes unstructured header text (RFC 2047 §5(1)): non-ASCII
// text with Q encoding, ASCII only when it needs it (see formatAddress).
func encodeText(s string) string {
	if !isPrintableASCII(s) {
		return mime.QEncoding.Encode("utf-8", s)
	}
	if needsForcedEncoding(s) {
		return encodeWordsB(s)
	}
	return s
}

// headerValue is how a customer's header value is written: X- headers are
// unstructured text, encoded as a subject is (encodeText: RFC 2047 when not
// ASCII, and when ASCII text would read as an encoded word, which a mail
// reader would decode, line breaks included); the standard ones are
// structured, ASCII only (see checkHeaderValue), written as is.
func headerValue(name, value string) string {
	if isXHeader(name) {
		return encodeText(value)
	}
	return value
}

func needsForcedEncoding(s string) bool {
	if strings.Contains(s, "=?") {
		return true
	}
	for _, w := range strings.Fields(s) {
		if len(w) > longWord {
			return true
		}
	}
	return false
}

// encodeWordsB encodes s as RFC 2047 B encoded words of at most 75
// characters each (45 bytes of text), cut between characters. The mime
// package's encoders leave printable ASCII alone, hence this one.
func encodeWordsB(s string) string {
	var words []string
	for s != "" {
		n := min(len(s), 45)
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n--
		}
		words = append(words, "=?utf-8?b?"+base64.StdEncoding.EncodeToString([]byte(s[:n]))+"?=")
		s = s[n:]
	}
	return strings.Join(words, " ")
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// entity is a MIME entity: its content header fields and its encoded body.
type entity struct {
	fields []field
	body   []byte
}

// bodyEntity is the message's content: text, html or both as
// multipart/alternative, wrapped in multipart/mixed with the attachments.
func bodyEntity(m *Message) (entity, error) {
	var content entity
	switch {
	case m.Text != "" && m.HTML != "":
		alternative, err := multipartEntity("alternative", textEntity("plain", m.Text), textEntity("html", m.HTML))
		if err != nil {
			return entity{}, err
		}
		content = alternative
	case m.HTML != "":
		content = textEntity("html", m.HTML)
	default:
		content = textEntity("plain", m.Text)
	}
	if len(m.Attachments) == 0 {
		return content, nil
	}
	parts := []entity{content}
	for _, a := range m.Attachments {
		att, err := attachmentEntity(a)
		if err != nil {
			return entity{}, err
		}
		parts = append(parts, att)
	}
	return multipartEntity("mixed", parts...)
}

// textEntity is a UTF-8 text part, quoted-printable so that no line exceeds
// 76 characters whatever the text, and line breaks become CRLF.
func textEntity(subtype, text string) entity {
	var b bytes.Buffer
	w := quotedprintable.NewWriter(&b)
	w.Write([]byte(text)) // writes to a bytes.Buffer do not fail
	w.Close()
	return entity{
		fields: []field{
			{"Content-Type", "text/" + subtype + "; charset=utf-8"},
			{"Content-Transfer-Encoding", "quoted-printable"},
		},
		body: b.Bytes(),
	}
}

func attachmentEntity(a DecodedAttachment) (entity, error) {
	fields, err := attachmentFields(a.Filename, a.ContentType)
	if err != nil {
		return entity{}, err
	}
	encoded := base64.StdEncoding.EncodeToString(a.Content)
	var b bytes.Buffer
	for len(encoded) > base64Line {
		b.WriteString(encoded[:base64Line])
		b.WriteString("\r\n")
		encoded = encoded[base64Line:]
	}
	b.WriteString(encoded)
	return entity{fields: fields, body: b.Bytes()}, nil
}

// attachmentFields are the header fields of an attachment part; Validate
// renders them too, so that a validated attachment always builds.
func attachmentFields(filename, contentType string) ([]field, error) {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, fmt.Errorf("mailmsg: attachment content type: %w", err)
	}
	// The name parameter is for old clients that ignore Content-Disposition.
	params["name"] = filename
	fields := []field{
		{"Content-Type", mime.FormatMediaType(mediaType, params)},
		{"Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filename})},
		{"Content-Transfer-Encoding", "base64"},
	}
	for _, f := range fields {
		if f.value == "" {
			return nil, errors.New("mailmsg: an attachment's content type or filename cannot be written")
		}
		if _, err := foldField(f.name, f.value); err != nil {
			return nil, fmt.Errorf("mailmsg: attachment %s: %w", f.name, err)
		}
	}
	return fields, nil
}

// multipartEntity joins parts as multipart/subtype (RFC 2046 §5.1.1). The
// boundary starts with "=_", which occurs in neither quoted-printable nor
// base64 text, so it cannot collide with a part's body.
func multipartEntity(subtype string, parts ...entity) (entity, error) {
	boundary := "=_" + rand.Text()
	var b bytes.Buffer
	for _, p := range parts {
		b.WriteString("--" + boundary + "\r\n")
		if err := writeFields(&b, p.fields); err != nil {
			return entity{}, err
		}
		b.WriteString("\r\n")
		b.Write(p.body)
		b.WriteString("\r\n")
	}
	b.WriteString("--" + boundary + "--\r\n")
	return entity{
		fields: []field{{"Content-Type", mime.FormatMediaType("multipart/"+subtype, map[string]string{"boundary": boundary})}},
		body:   b.Bytes(),
	}, nil
}
