package mailmsg

import (
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/mail"
	"net/textproto"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits of a send request.
const (
	// MaxRecipients is the most distinct addresses in to, cc and bcc
	// together, and the most entries in each of them.
	MaxRecipients = 50
	// maxAddressLength is the longest entry of an address list, display
	// name included: a header line's (RFC 5322 §2.1.1).
	maxAddressLength = 998
	// MaxSubject is the longest subject, in characters: the line length limit
	// of RFC 5322 §2.1.1.
	MaxSubject = 998
	// maxFilename keeps the Content-Disposition line, where a non-ASCII name
	// takes up to three characters per byte, within RFC 5322's 998.
	maxFilename = 255
	// maxContentType bounds a customer's Content-Type the same way.
	maxContentType = 255
	// MaxHeaders is the most extra headers an email may have, and
	// MaxHeaderBytes the most bytes of their names and values together:
	// receivers refuse a header section of megabytes with a 5xx, which
	// would bounce and suppress every recipient.
	MaxHeaders     = 50
	MaxHeaderBytes = 16 << 10
)

// Request is the decoded API body of POST /api/v1/emails. A single address
// given as a string arrives here as a list of one.
type Request struct {
	From                 string
	To, Cc, Bcc, ReplyTo []string
	Subject, Text, HTML  string
	Headers              map[string]string
	Attachments          []Attachment
}

// Attachment is one attachment of a Request, its content in standard base64.
type Attachment struct {
	Filename, Content, ContentType string
}

// FieldError is one invalid field of a Request. Location is the field's path
// in the API body ("body.to[3]", "body.headers.Bcc",
// "body.attachments[0].content"); Message is a sentence for the customer that
// does not repeat the field's value.
type FieldError struct {
	Location, Message string
}

func (e FieldError) Error() string { return e.Location + ": " + e.Message }

// Message is a validated, normalised Request: every address parsed (see
// ParseAddress), recipients unique, attachments decoded. Build renders it.
type Message struct {
	From                 mail.Address
	To, Cc, Bcc, ReplyTo []mail.Address
	Subject, Text, HTML  string
	// Headers are the customer's extra headers, sorted by name.
	Headers     []Header
	Attachments []DecodedAttachment
}

// Header is one extra header field. Name is "X-..." as the customer wrote
// it, or the canonical spelling of an allowed standard header.
type Header struct {
	Name, Value string
}

// DecodedAttachment is an attachment whose content is decoded. ContentType is
// a normalised media type with its parameters (from mime.FormatMediaType).
type DecodedAttachment struct {
	Filename    string
	ContentType string
	Content     []byte
}

// allowedStandardHeaders are the only non-"X-" headers a customer may set, by
// canonical name: the list-unsubscribe headers of RFC 2369 and RFC 8058 and
// the threading headers of RFC 5322 §3.6.4. Every other header is Mailyard's
// to write (From, To, Date, Message-ID, MIME structure, DKIM-Signature) or
// must never appear (Bcc).
var allowedStandardHeaders = []string{"List-Unsubscribe", "List-Unsubscribe-Post", "In-Reply-To", "References"}

// Recipients returns the envelope recipients (RCPT TO) of m: its to, cc and
// bcc addresses, each once (compared case-insensitively), domains lower-case.
func (m *Message) Recipients() []string {
	var out []string
	seen := map[string]bool{}
	for _, list := range [][]mail.Address{m.To, m.Cc, m.Bcc} {
		for _, a := range list {
			addr := a.Address
			if at := strings.LastIndexByte(addr, '@'); at >= 0 {
				addr = addr[:at+1] + strings.ToLower(addr[at+1:])
			}
			key := strings.ToLower(addr)
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, addr)
		}
	}
	return out
}

// Validate checks r for a sender whose verified domain is domain (normalised
// lower-case ASCII). It returns the normalised Message, or every invalid field
// of r, one FieldError each, in the order of the API body.
//
// Recipients that appear more than once in to, cc and bcc (compared
// case-insensitively) are kept once, at their first place in the order to,
// cc, bcc: an address in both to and bcc is sent once, visibly. The limit of
// MaxRecipients counts the distinct addresses.
func Validate(r Request, domain string) (*Message, []FieldError) {
	v := validator{}
	m := &Message{Subject: r.Subject, Text: r.Text, HTML: r.HTML}
	domain = strings.TrimSuffix(strings.ToLower(domain), ".")

	if from, ok := v.address("body.from", r.From); ok {
		if underDomain(domainOf(from.Address), domain) {
			m.From = from
		} else {
			v.add("body.from", fmt.Sprintf("the sender's domain must be %s or one of its subdomains, the domain of this API key", domain))
		}
	}

	m.To, m.Cc, m.Bcc = v.recipients(r.To, r.Cc, r.Bcc)
	m.ReplyTo = v.addresses("body.reply_to", r.ReplyTo, map[string]bool{})
	v.subject(r.Subject)

	switch {
	case r.Text == "" && r.HTML == "":
		v.add("body.text", "at least one of text and html is required")
	default:
		if !utf8.ValidString(r.Text) {
			v.add("body.text", "the text is not valid UTF-8")
		}
		if !utf8.ValidString(r.HTML) {
			v.add("body.html", "the html is not valid UTF-8")
		}
	}

	m.Headers = v.headers(r.Headers)
	for i, a := range r.Attachments {
		if d, ok := v.attachment(fmt.Sprintf("body.attachments[%d]", i), a); ok {
			m.Attachments = append(m.Attachments, d)
		}
	}

	if len(v.errs) > 0 {
		return nil, v.errs
	}
	return m, nil
}

type validator struct {
	errs []FieldError
}

func (v *validator) add(location, message string) {
	v.errs = append(v.errs, FieldError{Location: location, Message: message})
}

// recipients parses to, cc and bcc, dropping repeated addresses, and checks
// that there are 1 to MaxRecipients distinct ones.
func (v *validator) recipients(to, cc, bcc []string) (toA, ccA, bccA []mail.Address) {
	seen := map[string]bool{}
	before := len(v.errs)
	toA = v.addresses("body.to", to, seen)
	ccA = v.addresses("body.cc", cc, seen)
	bccA = v.addresses("body.bcc", bcc, seen)
	total := len(toA) + len(ccA) + len(bccA)
	switch {
	case total > MaxRecipients:
		// Point at the field holding the first address over the limit.
		field := "body.to"
		if len(toA) <= MaxRecipients {
			field = "body.cc"
			if len(toA)+len(ccA) <= MaxRecipients {
				field = "body.bcc"
			}
		}
		v.add(field, fmt.Sprintf("%d distinct recipients in to, cc and bcc together; the maximum is %d", total, MaxRecipients))
	case total == 0 && len(v.errs) == before:
		v.add("body.to", "at least one recipient is required in to, cc or bcc")
	}
	return toA, ccA, bccA
}

// address parses one address of the request (ParseAddress), whose display
// name must not hold a line separator either.
func (v *validator) address(location, s string) (mail.Address, bool) {
	a, err := ParseAddress(s)
	if err == nil && hasLineSeparator(a.Name) {
		err = errors.New("the display name contains a line break")
	}
	if err != nil {
		v.add(location, err.Error())
		return a, false
	}
	return a, true
}

// hasLineSeparator reports whether s holds Unicode's line or paragraph
// separator (U+2028, U+2029), which mail readers show as a line break. The
// API refuses them where it refuses line breaks; Build does not, so that an
// email accepted before this rule is still built.
func hasLineSeparator(s string) bool { return strings.ContainsAny(s, "\u2028\u2029") }

// addresses parses the entries of one address list, skipping addresses
// already in seen (and adding the new ones to it). A list of more than
// MaxRecipients entries is refused whole, before any is parsed.
func (v *validator) addresses(location string, list []string, seen map[string]bool) []mail.Address {
	if len(list) > MaxRecipients {
		v.add(location, fmt.Sprintf("%d entries; the maximum is %d in one field", len(list), MaxRecipients))
		return nil
	}
	var out []mail.Address
	for i, s := range list {
		if n := utf8.RuneCountInString(s); n > maxAddressLength {
			v.add(fmt.Sprintf("%s[%d]", location, i), fmt.Sprintf("the address is %d characters long; the maximum is %d", n, maxAddressLength))
			continue
		}
		a, ok := v.address(fmt.Sprintf("%s[%d]", location, i), s)
		if !ok {
			continue
		}
		key := strings.ToLower(a.Address)
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, a)
	}
	return out
}

func (v *validator) subject(s string) {
	switch n := utf8.RuneCountInString(s); {
	case !utf8.ValidString(s):
		v.add("body.subject", "the subject is not valid UTF-8")
	case strings.TrimSpace(s) == "":
		v.add("body.subject", "the subject is empty")
	case n > MaxSubject:
		v.add("body.subject", fmt.Sprintf("the subject is %d characters long; the maximum is %d", n, MaxSubject))
	case hasControl(s) || hasLineSeparator(s):
		v.add("body.subject", "the subject contains a line break or another control character")
	}
}

// headers checks the extra headers and returns them sorted by name.
func (v *validator) headers(h map[string]string) []Header {
	size := 0
	names := make([]string, 0, len(h))
	for name, value := range h {
		names = append(names, name)
		size += len(name) + len(value)
	}
	switch {
	case len(h) > MaxHeaders:
		v.add("body.headers", fmt.Sprintf("%d headers; the maximum is %d", len(h), MaxHeaders))
		return nil
	case size > MaxHeaderBytes:
		v.add("body.headers", fmt.Sprintf("the headers' names and values are %d bytes long; the maximum is %d", size, MaxHeaderBytes))
		return nil
	}
	slices.Sort(names) // errors in a stable order
	var out []Header
	seen := map[string]string{}
	for _, given := range names {
		location := "body.headers." + given
		name, err := headerName(given)
		if err != nil {
			v.add(location, err.Error())
			continue
		}
		if first, dup := seen[strings.ToLower(name)]; dup {
			v.add(location, fmt.Sprintf("the header is also given as %s; give each header once", first))
			continue
		}
		seen[strings.ToLower(name)] = given
		value := h[given]
		if err := checkHeaderValue(name, value); err != nil {
			v.add(location, err.Error())
			continue
		}
		if hasLineSeparator(value) {
			v.add(location, "the value contains a line break")
			continue
		}
		out = append(out, Header{Name: name, Value: value})
	}
	slices.SortFunc(out, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// headerName returns the name to write for a customer's header: an "X-"
// name as given, or an allowed standard name in its canonical spelling.
func headerName(name string) (string, error) {
	if name == "" || !isFieldName(name) {
		return "", fmt.Errorf("a header name is letters, digits and !#$%%&'*+-.^_`|~ (no spaces, colons or brackets)")
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	if slices.Contains(allowedStandardHeaders, canonical) {
		return canonical, nil
	}
	if isXHeader(name) {
		return name, nil
	}
	return "", fmt.Errorf("only X- headers and %s can be set; Mailyard writes the others", strings.Join(allowedStandardHeaders, ", "))
}

// checkHeaderValue checks a customer's header value and that it can be
// written as a header field within the line length limit.
func checkHeaderValue(name, value string) error {
	switch {
	case !utf8.ValidString(value):
		return fmt.Errorf("the value is not valid UTF-8")
	case hasControl(value):
		return fmt.Errorf("the value contains a line break or another control character")
	case strings.TrimSpace(value) == "":
		return fmt.Errorf("the value is empty")
	case !isASCII(value) && !isXHeader(name):
		return fmt.Errorf("the value of %s must be ASCII", name)
	}
	if _, err := foldField(name, headerValue(name, value)); err != nil {
		return fmt.Errorf("the value has a word too long for one header line (at most %d characters with the name)", maxLine)
	}
	return nil
}

// attachment checks and decodes one attachment.
func (v *validator) attachment(location string, a Attachment) (DecodedAttachment, bool) {
	ok := true
	switch {
	case !utf8.ValidString(a.Filename):
		v.add(location+".filename", "the filename is not valid UTF-8")
		ok = false
	case strings.TrimSpace(a.Filename) == "":
		v.add(location+".filename", "the filename is empty")
		ok = false
	case hasControl(a.Filename) || hasLineSeparator(a.Filename):
		v.add(location+".filename", "the filename contains a line break or another control character")
		ok = false
	case len(a.Filename) > maxFilename:
		v.add(location+".filename", fmt.Sprintf("the filename is %d bytes long in UTF-8; the maximum is %d", len(a.Filename), maxFilename))
		ok = false
	}

	content, err := base64.StdEncoding.DecodeString(a.Content)
	if err != nil {
		v.add(location+".content", "the content is not valid base64 (standard alphabet, with padding)")
		ok = false
	}

	contentType, err := attachmentContentType(a.ContentType)
	if err != nil {
		v.add(location+".content_type", err.Error())
		ok = false
	} else if ok {
		if _, err := attachmentFields(a.Filename, contentType); err != nil {
			v.add(location+".filename", "the filename and content type do not fit in the attachment's header lines")
			ok = false
		}
	}
	return DecodedAttachment{Filename: a.Filename, ContentType: contentType, Content: content}, ok
}

// attachmentContentType normalises a customer's content type, by default
// application/octet-stream.
func attachmentContentType(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "application/octet-stream", nil
	}
	if len(s) > maxContentType {
		return "", fmt.Errorf("the content type is %d characters long; the maximum is %d", len(s), maxContentType)
	}
	if hasControl(s) || !utf8.ValidString(s) {
		return "", fmt.Errorf("the content type contains a line break or another control character")
	}
	mediaType, params, err := mime.ParseMediaType(s)
	if err != nil {
		return "", fmt.Errorf(`the content type is not a media type such as "application/pdf" (%v)`, err)
	}
	if typ, sub, _ := strings.Cut(mediaType, "/"); typ == "" || sub == "" {
		// ParseMediaType takes a bare token ("pdf", "multipart").
		return "", fmt.Errorf(`the content type is not a media type such as "application/pdf": it needs a type and a subtype`)
	}
	// Attachments are sent base64-encoded, which RFC 2045 §6.4 and RFC 2046
	// §5.2.1 forbid for these types: the receiver would not read them.
	if strings.HasPrefix(mediaType, "multipart/") || strings.HasPrefix(mediaType, "message/") {
		return "", fmt.Errorf("multipart/ and message/ types cannot be attachments; use application/octet-stream")
	}
	delete(params, "name") // Build sets it from the filename
	formatted := mime.FormatMediaType(mediaType, params)
	if formatted == "" {
		return "", fmt.Errorf(`the content type is not a media type such as "application/pdf"`)
	}
	return formatted, nil
}

func isXHeader(name string) bool {
	return len(name) > 2 && strings.EqualFold(name[:2], "X-")
}

// isFieldName reports whether s is a field name made of token characters
// (RFC 9110 §5.6.2: letters, digits and !#$%&'*+-.^_`|~). RFC 5322 allows
// any printable ASCII but the colon; the narrower set is what mail software
// reads as a field name (Go's net/textproto among it, which the signing
// reads the message with), so a name such as "X-Order(1)" is refused here
// instead of making the message unsignable later.
func isFieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
