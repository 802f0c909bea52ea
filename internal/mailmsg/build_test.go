package mailmsg

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var testDate = time.Date(2026, 3, 14, 15, 9, 26, 0, time.FixedZone("", 3600))

// mustValidate validates r for testDomain and fails the test on errors.
func mustValidate(t testing.TB, r Request) *Message {
	t.Helper()
	m, errs := Validate(r, testDomain)
	if errs != nil {
		t.Fatalf("Validate: %v", errs)
	}
	return m
}

func mustBuild(t testing.TB, m *Message) []byte {
	t.Helper()
	raw, err := Build(m, "em_0123abcd", testDomain, testDate)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return raw
}

// checkWireFormat checks what every rendered message must be: 7-bit ASCII,
// CRLF line endings only, no line over 998 characters, ending in CRLF.
func checkWireFormat(t testing.TB, raw []byte) {
	t.Helper()
	for i, c := range raw {
		switch {
		case c >= 0x80:
			t.Fatalf("byte %d is %#x: the message is not 7-bit", i, c)
		case c == '\r' && (i+1 == len(raw) || raw[i+1] != '\n'):
			t.Fatalf("byte %d is a CR without LF", i)
		case c == '\n' && (i == 0 || raw[i-1] != '\r'):
			t.Fatalf("byte %d is an LF without CR", i)
		}
	}
	if !bytes.HasSuffix(raw, []byte("\r\n")) {
		t.Fatal("the message does not end with CRLF")
	}
	for n, line := range bytes.Split(raw, []byte("\r\n")) {
		if len(line) > maxLine {
			t.Fatalf("line %d is %d characters long", n+1, len(line))
		}
	}
}

// rawHeader returns the values of the header fields named name in raw,
// unfolded as RFC 5322 §2.2.3 says (CRLF removed, whitespace kept), unlike
// net/textproto, which turns folding whitespace into one space.
func rawHeader(raw []byte, name string) []string {
	head, _, _ := strings.Cut(string(raw), "\r\n\r\n")
	unfolded := regexp.MustCompile(`\r\n([ \t])`).ReplaceAllString(head, "$1")
	var values []string
	for _, line := range strings.Split(unfolded, "\r\n") {
		if n, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(n, name) {
			values = append(values, strings.TrimPrefix(v, " "))
		}
	}
	return values
}

func decodeHeader(t testing.TB, s string) string {
	t.Helper()
	d, err := new(mime.WordDecoder).DecodeHeader(s)
	if err != nil {
		t.Fatalf("decoding %q: %v", s, err)
	}
	return d
}

func readAll(t testing.TB, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

func TestBuildFullMessage(t *testing.T) {
	pdf := bytes.Repeat([]byte("%PDF-1.4 binary \x00\xff\x10 "), 40)
	r := Request{
		From:    "Acme Café <news@mail.example.com>",
		To:      []string{"Alice <alice@example.org>", `"Bob, Jr." <bob@Bücher.example>`},
		Cc:      []string{"carol@example.net"},
		Bcc:     []string{"Hidden Person <hidden@secret.example>"},
		ReplyTo: []string{"support@example.com"},
		Subject: "Grüße — your order №42 is on its way",
		Text:    "Hello Alice,\nyour order ships today.\n" + strings.Repeat("long line ", 200) + "\n",
		HTML:    "<p>Hello <b>Alice</b>,</p>\n<p>your order ships today. =?utf-8?q?x?=</p>",
		Headers: map[string]string{
			"X-Campaign":            "spring-2026",
			"X-Note":                "déjà vu",
			"X-Looks-Encoded":       "=?utf-8?q?a=0D=0ABcc:_victim@example.org?=",
			"List-Unsubscribe":      "<https://example.com/u/123>, <mailto:unsub@example.com?subject=u123>",
			"List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
		},
		Attachments: []Attachment{
			{Filename: "invoice.pdf", Content: base64.StdEncoding.EncodeToString(pdf), ContentType: "application/pdf"},
			{Filename: "Übersicht 2026.txt", Content: base64.StdEncoding.EncodeToString([]byte("plain\r\n")), ContentType: "text/plain; charset=utf-8"},
		},
	}
	raw := mustBuild(t, mustValidate(t, r))
	checkWireFormat(t, raw)

	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("net/mail cannot read the message: %v\n%s", err, raw)
	}
	h := msg.Header

	if got := h.Get("Message-ID"); got != "<em_0123abcd@example.com>" {
		t.Errorf("Message-ID = %q", got)
	}
	if d, err := h.Date(); err != nil || !d.Equal(testDate) {
		t.Errorf("Date = %v, %v; want %v", d, err, testDate)
	}
	if got := h.Get("MIME-Version"); got != "1.0" {
		t.Errorf("MIME-Version = %q", got)
	}
	for _, tt := range []struct {
		name string
		want []*mail.Address
	}{
		{"From", []*mail.Address{{Name: "Acme Café", Address: "news@mail.example.com"}}},
		{"To", []*mail.Address{{Name: "Alice", Address: "alice@example.org"}, {Name: "Bob, Jr.", Address: "bob@xn--bcher-kva.example"}}},
		{"Cc", []*mail.Address{{Address: "carol@example.net"}}},
		{"Reply-To", []*mail.Address{{Address: "support@example.com"}}},
	} {
		got, err := h.AddressList(tt.name)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	if _, ok := h["Bcc"]; ok {
		t.Error("the message has a Bcc header")
	}
	if bytes.Contains(bytes.ToLower(raw), []byte("hidden")) || bytes.Contains(raw, []byte("secret.example")) {
		t.Error("the Bcc recipient appears in the message")
	}
	if got := decodeHeader(t, rawHeader(raw, "Subject")[0]); got != r.Subject {
		t.Errorf("Subject decodes to %q, want %q", got, r.Subject)
	}
	for name, want := range r.Headers {
		if got := rawHeader(raw, name); len(got) != 1 || decodeHeader(t, got[0]) != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}

	mediaType, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || mediaType != "multipart/mixed" {
		t.Fatalf("Content-Type = %q, %v; want multipart/mixed", h.Get("Content-Type"), err)
	}
	mixed := multipart.NewReader(msg.Body, params["boundary"])

	// Part 1: text and html as alternatives. multipart.Reader decodes
	// quoted-printable itself.
	part, err := mixed.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	mediaType, params, _ = mime.ParseMediaType(part.Header.Get("Content-Type"))
	if mediaType != "multipart/alternative" {
		t.Fatalf("first part is %q, want multipart/alternative", mediaType)
	}
	alternative := multipart.NewReader(part, params["boundary"])
	for _, want := range []struct{ contentType, body string }{
		{"text/plain; charset=utf-8", r.Text},
		{"text/html; charset=utf-8", r.HTML},
	} {
		p, err := alternative.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Header.Get("Content-Type"); got != want.contentType {
			t.Errorf("alternative Content-Type = %q, want %q", got, want.contentType)
		}
		if got := string(readAll(t, p)); got != crlf(want.body) {
			t.Errorf("%s body = %q, want %q", want.contentType, got, crlf(want.body))
		}
	}
	if _, err := alternative.NextPart(); err != io.EOF {
		t.Errorf("a third alternative: %v", err)
	}

	for _, want := range []struct {
		filename, contentType string
		content               []byte
	}{
		{"invoice.pdf", "application/pdf", pdf},
		{"Übersicht 2026.txt", "text/plain", []byte("plain\r\n")},
	} {
		p, err := mixed.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		if got := p.FileName(); got != want.filename {
			t.Errorf("attachment filename = %q, want %q", got, want.filename)
		}
		disposition, _, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		if disposition != "attachment" {
			t.Errorf("Content-Disposition = %q", p.Header.Get("Content-Disposition"))
		}
		mediaType, params, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if mediaType != want.contentType || params["name"] != want.filename {
			t.Errorf("attachment Content-Type = %q", p.Header.Get("Content-Type"))
		}
		if p.Header.Get("Content-Transfer-Encoding") != "base64" {
			t.Errorf("attachment Content-Transfer-Encoding = %q", p.Header.Get("Content-Transfer-Encoding"))
		}
		content, err := base64.StdEncoding.DecodeString(string(readAll(t, p)))
		if err != nil || !bytes.Equal(content, want.content) {
			t.Errorf("attachment %s content = %q, %v", want.filename, content, err)
		}
	}
	if _, err := mixed.NextPart(); err != io.EOF {
		t.Errorf("a part after the attachments: %v", err)
	}

	// RFC 2231 for the non-ASCII filename, base64 lines of 76.
	if !bytes.Contains(raw, []byte(`filename*=utf-8''%C3%9Cbersicht%202026.txt`)) {
		t.Error("the non-ASCII filename is not RFC 2231 encoded")
	}
	body := raw[bytes.Index(raw, []byte("invoice.pdf")):]
	if lines := regexp.MustCompile(`\r\n([A-Za-z0-9+/=]+)\r\n`).FindSubmatch(body); lines == nil || len(lines[1]) != base64Line {
		t.Errorf("the first base64 line is not %d characters: %q", base64Line, lines)
	}
}

func TestBuildSinglePart(t *testing.T) {
	for _, tt := range []struct {
		name, text, html, contentType, body string
	}{
		{"text only", "Hi\nthere", "", "text/plain; charset=utf-8", "Hi\r\nthere"},
		{"html only", "", "<p>Hi</p>", "text/html; charset=utf-8", "<p>Hi</p>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			r.Text, r.HTML = tt.text, tt.html
			raw := mustBuild(t, mustValidate(t, r))
			checkWireFormat(t, raw)
			msg, err := mail.ReadMessage(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if got := msg.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
			}
			if got := msg.Header.Get("Content-Transfer-Encoding"); got != "quoted-printable" {
				t.Errorf("Content-Transfer-Encoding = %q", got)
			}
			if _, ok := msg.Header["Cc"]; ok {
				t.Error("a Cc header without cc recipients")
			}
			// Build ends the data with CRLF, which the decoded text shows.
			if got := string(readAll(t, msg.Body)); got != tt.body+"\r\n" && got != tt.body {
				t.Errorf("body = %q, want %q", got, tt.body)
			}
		})
	}
}

// Long values must fold or be encoded so that no line exceeds 998
// characters, and still read back as written.
func TestBuildLongValues(t *testing.T) {
	longName := strings.Repeat("N", 300)
	var to []string
	for _, a := range addrs(40, "recipient%d@x.example") {
		to = append(to, `"`+longName+`, with a comma" <`+a+">")
	}
	r := validRequest()
	r.From = "=?utf-8?q?Acme?= <news@example.com>"
	r.To = to
	r.Cc = []string{strings.Repeat("é", 200) + " <cc@x.example>"}
	r.Subject = strings.Repeat("a", 998)
	r.Text = strings.Repeat("x", 5000) + "\n" + strings.Repeat("y ", 3000)
	r.Headers = map[string]string{
		"X-Words":   strings.TrimSpace(strings.Repeat("word ", 300)),
		"X-Unicode": strings.Repeat("ü", 500),
	}
	m := mustValidate(t, r)
	raw := mustBuild(t, m)
	checkWireFormat(t, raw)

	head, _, _ := strings.Cut(string(raw), "\r\n\r\n")
	for _, line := range strings.Split(head, "\r\n") {
		if len(line) > foldAt+10 {
			t.Errorf("header line of %d characters: %.60q...", len(line), line)
		}
	}
	if got := decodeHeader(t, rawHeader(raw, "Subject")[0]); got != r.Subject {
		t.Errorf("the 998-character subject decodes to %d characters", len(got))
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got, err := msg.Header.AddressList("To")
	if err != nil || len(got) != 40 || got[39].Name != longName+", with a comma" || got[39].Address != "recipient39@x.example" {
		t.Errorf("To reads back as %d addresses, %v", len(got), err)
	}
	cc, err := msg.Header.AddressList("Cc")
	if err != nil || len(cc) != 1 || cc[0].Name != strings.Repeat("é", 200) {
		t.Errorf("Cc reads back as %v, %v", cc, err)
	}
	for name, want := range r.Headers {
		if got := decodeHeader(t, rawHeader(raw, name)[0]); got != want {
			t.Errorf("%s reads back as %q", name, got)
		}
	}
	if got := string(readAll(t, multipartlessBody(t, msg))); got != crlf(r.Text)+"\r\n" {
		t.Errorf("the text reads back with %d characters, want %d", len(got), len(r.Text))
	}
}

// multipartlessBody decodes the quoted-printable body of a single-part message.
func multipartlessBody(t *testing.T, msg *mail.Message) io.Reader {
	t.Helper()
	if msg.Header.Get("Content-Transfer-Encoding") != "quoted-printable" {
		t.Fatalf("Content-Transfer-Encoding = %q", msg.Header.Get("Content-Transfer-Encoding"))
	}
	return quotedprintable.NewReader(msg.Body)
}

// Text that only looks like an RFC 2047 encoded word is encoded, so that
// receivers show it as written rather than decode it.
func TestBuildEncodedWordLookalikes(t *testing.T) {
	r := validRequest()
	r.Subject = "=?utf-8?q?not_encoded?="
	r.From = `"=?utf-8?q?Not_Encoded?=" <news@example.com>`
	m := mustValidate(t, r)
	if m.From.Name != "=?utf-8?q?Not_Encoded?=" {
		t.Fatalf("the quoted display name was decoded to %q", m.From.Name)
	}
	raw := mustBuild(t, m)
	if got := decodeHeader(t, rawHeader(raw, "Subject")[0]); got != r.Subject {
		t.Errorf("Subject reads back as %q", got)
	}
	from, err := mail.ParseAddress(rawHeader(raw, "From")[0])
	if err != nil || from.Name != m.From.Name {
		t.Errorf("From reads back as %v, %v", from, err)
	}
}

func TestBuildRejects(t *testing.T) {
	good := func() *Message { return mustValidate(t, validRequest()) }
	tests := []struct {
		name    string
		m       *Message
		emailID string
		domain  string
		date    time.Time
	}{
		{"no message", nil, "id", testDomain, testDate},
		{"an empty email id", good(), "", testDomain, testDate},
		{"an email id with a space", good(), "a b", testDomain, testDate},
		{"an email id with >", good(), "a>b", testDomain, testDate},
		{"no domain", good(), "id", "", testDate},
		{"year 10000", good(), "id", testDomain, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"a subject with CRLF set directly", func() *Message {
			m := good()
			m.Subject = "Hi\r\nBcc: v@x.example"
			return m
		}(), "id", testDomain, testDate},
		{"a Bcc header set directly", func() *Message {
			m := good()
			m.Headers = []Header{{"Bcc", "v@x.example"}}
			return m
		}(), "id", testDomain, testDate},
		{"a display name with LF set directly", func() *Message {
			m := good()
			m.To[0].Name = "A\nBcc: v@x.example"
			return m
		}(), "id", testDomain, testDate},
		{"no body", func() *Message {
			m := good()
			m.Text = ""
			return m
		}(), "id", testDomain, testDate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := Build(tt.m, tt.emailID, tt.domain, tt.date)
			if err == nil {
				t.Fatalf("Build succeeded:\n%s", raw)
			}
		})
	}
}

func TestFoldField(t *testing.T) {
	folded, err := foldField("X-A", strings.Repeat("abcdefghi ", 20)+"  end  ")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(folded, "\r\n"), "\r\n")
	if len(lines) < 3 {
		t.Errorf("folded into %d lines: %q", len(lines), folded)
	}
	for _, l := range lines {
		if len(l) > foldAt || strings.TrimSpace(l) == "" {
			t.Errorf("line %q is too long or blank", l)
		}
	}
	if unfolded := strings.ReplaceAll(folded, "\r\n", ""); unfolded != "X-A: "+strings.Repeat("abcdefghi ", 20)+"  end  " {
		t.Errorf("unfolds to %q", unfolded)
	}
	for _, bad := range []string{"a\r\nb", "a\nb", "a\rb", "é", "a\x00"} {
		if _, err := foldField("X-A", bad); err == nil {
			t.Errorf("foldField accepted %q", bad)
		}
	}
	if _, err := foldField("X-A", strings.Repeat("a", 994)); err == nil {
		t.Error("foldField accepted a 999-character line")
	}
}
