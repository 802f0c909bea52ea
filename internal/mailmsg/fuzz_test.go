package mailmsg

import (
	"bytes"
	"net/mail"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// listSeparator splits one fuzzed string into an address list.
const listSeparator = "\x1e"

// addressSeeds are good and nasty addresses: display names quoted, encoded
// (with encoded line breaks), with specials; IDN and punycode domains;
// quoted, non-ASCII and over-long local parts; literals; lists and groups.
var addressSeeds = []string{
	"a@example.com", "Acme <news@example.com>", `"Bob, Jr." <bob@example.org>`, "  Spaced   Name  <x@Example.ORG>",
	"=?utf-8?q?Caf=C3=A9?= <c@x.example>", "=?utf-8?b?QWNtZQ0KQmNjOiB2QHguZXhhbXBsZQ==?= <n@example.com>",
	`"=?utf-8?q?lookalike?=" <l@x.example>`, "Jörg <joerg@bücher.example>", "joerg@xn--bcher-kva.example",
	`"a b"@x.example`, "jörg@x.example", "a@[192.0.2.1]", "root@localhost", "a@192.0.2.1", "a@x_y.example",
	"a@x.example, b@x.example", "undisclosed-recipients:;", "a@x.example (comment)", "<a@x.example>",
	"A\r\nBcc: v@x.example <a@x.example>", "a@x.example\n", "\x00@x.example", "a..b@x.example", ".a@x.example",
	strings.Repeat("l", 65) + "@x.example", "a@" + strings.Repeat("d", 64) + ".example", "é <e@x.example>",
	`"\"quoted\" \\ name" <q@x.example>`, "a@x.example.", "a@ x.example", "@x.example", "a@", "", "\xff <a@x.example>",
	"=?utf-8?q?=E2=80=A8?= <u@x.example>", "a@ＥＸＡＭＰＬＥ.com", "a@ex\u3002ample.com", strings.Repeat("N", 300) + " <n@x.example>",
}

// FuzzParseAddress checks that ParseAddress either fails with an empty
// address or returns a normalised one, where normalised means: a display
// name without control characters; an ASCII address with a lower-case domain;
// writing it as Build does and parsing it again gives the same address; and
// the bare address parses to itself.
func FuzzParseAddress(f *testing.F) {
	for _, s := range addressSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		a, err := ParseAddress(input)
		if err != nil {
			if a != (mail.Address{}) || err.Error() == "" {
				t.Fatalf("ParseAddress(%q) = %+v, %v; want an empty address and a message", input, a, err)
			}
			return
		}
		if hasControl(a.Name) || strings.TrimSpace(a.Name) != a.Name {
			t.Fatalf("ParseAddress(%q): display name %q has control characters or outer spaces", input, a.Name)
		}
		if !isPrintableASCII(a.Address) || strings.ContainsAny(a.Address, " <>\"") {
			t.Fatalf("ParseAddress(%q): address %q is not a bare ASCII address", input, a.Address)
		}
		if d := domainOf(a.Address); d != strings.ToLower(d) {
			t.Fatalf("ParseAddress(%q): domain %q is not lower-case", input, d)
		}
		written := formatAddress(a)
		if again, err := ParseAddress(written); err != nil || again != a {
			t.Fatalf("ParseAddress(%q) = %+v, written %q, parses to %+v, %v", input, a, written, again, err)
		}
		if bare, err := ParseAddress(a.Address); err != nil || bare != (mail.Address{Address: a.Address}) {
			t.Fatalf("ParseAddress(%q) = %+v, %v; want the address itself", a.Address, bare, err)
		}
	})
}

// FuzzValidate checks, for any request, that Validate answers either errors
// (each at a body location) or a message, and that a message: has 1 to 50
// distinct recipients, each a bare address without control characters or
// spaces; builds; and renders as 7-bit CRLF text whose header has exactly the
// fields Build writes plus the customer's own, once each — so no input
// injects a header (a Bcc, a second From) or a line break.
func FuzzValidate(f *testing.F) {
	f.Add("Acme <news@example.com>", "alice@example.org", "", "", "", "Hello", "Hi", "", "", "", "", "", "")
	f.Add("news@mail.example.com", "a@x.example\x1eA@X.example", "b@x.example", "Hidden <h@x.example>", "r@x.example",
		"Grüße =?x", "text\r\nmore", "<p>html</p>", "List-Unsubscribe", "<mailto:u@example.com>",
		"Übersicht.txt", "aGVsbG8=", "text/plain; charset=utf-8")
	f.Add("=?utf-8?b?QWNtZQ0KQmNjOiB2QHguZXhhbXBsZQ==?= <n@example.com>", "a@x.example", "", "", "",
		"Hi\r\nBcc: v@x.example", "", "", "Bcc", "v@x.example", "a\r\n.txt", "!!", "multipart/mixed")
	f.Add("news@example.com", strings.Repeat("x@y.example\x1e", 51), "", "", "", strings.Repeat("s", 999), "t", "", "X-A", strings.Repeat("ü", 400), "f", "", "")
	f.Add("news@example.com", "a@x.example", "", "", "", strings.Repeat("w ", 400), "t", "", "x-tag", "a\nb", strings.Repeat("é", 127), "", "application/pdf; x*=utf-8''%0D%0A")
	f.Fuzz(func(t *testing.T, from, to, cc, bcc, replyTo, subject, text, html, headerName, headerValue, filename, content, contentType string) {
		r := Request{
			From: from, To: splitList(to), Cc: splitList(cc), Bcc: splitList(bcc), ReplyTo: splitList(replyTo),
			Subject: subject, Text: text, HTML: html,
		}
		if headerName != "" {
			r.Headers = map[string]string{headerName: headerValue}
		}
		if filename != "" || content != "" || contentType != "" {
			r.Attachments = []Attachment{{Filename: filename, Content: content, ContentType: contentType}}
		}
		m, errs := Validate(r, testDomain)
		if errs != nil {
			if m != nil {
				t.Fatalf("Validate returned a message and errors %v", errs)
			}
			for _, e := range errs {
				if !strings.HasPrefix(e.Location, "body.") || e.Message == "" {
					t.Fatalf("error %+v has no body location or no message", e)
				}
			}
			return
		}

		recipients := m.Recipients()
		if len(recipients) < 1 || len(recipients) > MaxRecipients {
			t.Fatalf("%d recipients", len(recipients))
		}
		for _, rcpt := range recipients {
			if strings.ContainsFunc(rcpt, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
				t.Fatalf("recipient %q has a control character or space", rcpt)
			}
		}

		raw, err := Build(m, "em_fuzz", testDomain, testDate)
		if err != nil {
			t.Fatalf("a validated message does not build: %v", err)
		}
		checkWireFormat(t, raw)
		msg, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("net/mail cannot read the built message: %v", err)
		}
		want := map[string]int{"Date": 1, "Message-Id": 1, "From": 1, "Subject": 1, "Mime-Version": 1, "Content-Type": 1}
		for name, list := range map[string][]mail.Address{"To": m.To, "Cc": m.Cc, "Reply-To": m.ReplyTo} {
			if len(list) > 0 {
				want[name] = 1
			}
		}
		if len(m.Attachments) == 0 && (m.Text == "" || m.HTML == "") {
			want["Content-Transfer-Encoding"] = 1
		}
		for _, h := range m.Headers {
			want[textproto.CanonicalMIMEHeaderKey(h.Name)]++
		}
		got := map[string]int{}
		for name, values := range msg.Header {
			got[name] = len(values)
		}
		if len(got) != len(want) {
			t.Fatalf("header fields %v, want %v", got, want)
		}
		for name, n := range want {
			if got[name] != n {
				t.Fatalf("header fields %v, want %v", got, want)
			}
		}
	})
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, listSeparator)
}

// FuzzPrepareSubmitted checks that a submitted message is refused or
// gives a From at the domain and a Subject and display name without a
// control character a header cannot carry (NUL above all, which PostgreSQL
// cannot store), and no line longer than RFC 5322 allows.
func FuzzPrepareSubmitted(f *testing.F) {
	for _, s := range []string{
		"From: a@example.com\r\nSubject: Hi\r\n\r\nbody\r\n",
		"From: =?utf-8?q?Bil=00l?= <a@example.com>\r\nSubject: =?utf-8?q?a=00b?=\r\n\r\n",
		"From: \"=?utf-8?b?QQ0KQg==?=\" <a@mail.example.com>\r\nSubject: =?iso-8859-1?q?=85?=\r\nBcc: b@x.example\r\n\r\n",
		"From: a@example.com\r\nSubject: a\tb\r\n =?utf-8?q?=7F?=\r\n",
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, utf8 bool) {
		prepared, info, err := PrepareSubmitted(raw, "em_fuzz", testDomain, testDate, utf8)
		if err != nil {
			return
		}
		if hasLongLine(prepared) {
			t.Fatal("the prepared message has a line longer than 998 characters")
		}
		if !underDomain(strings.ToLower(domainOf(info.From.Address)), testDomain) {
			t.Fatalf("From %q is not at %s", info.From.Address, testDomain)
		}
		if hasHeaderControl(info.Subject) || hasHeaderControl(info.From.Name) {
			t.Fatalf("subject %q or display name %q has a control character", info.Subject, info.From.Name)
		}
		for _, a := range slices.Concat(info.To, info.Cc) {
			if hasHeaderControl(a) || strings.ToValidUTF8(a, "\uFFFD") != a {
				t.Fatalf("To or Cc entry %q has a control character or invalid UTF-8", a)
			}
		}
	})
}
