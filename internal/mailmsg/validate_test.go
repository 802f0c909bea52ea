package mailmsg

import (
	"encoding/base64"
	"fmt"
	"net/mail"
	"reflect"
	"strings"
	"testing"
)

const testDomain = "example.com"

// validRequest is the smallest request that validates; each test case
// changes one thing.
func validRequest() Request {
	return Request{
		From:    "Acme <news@example.com>",
		To:      []string{"alice@example.org"},
		Subject: "Hello",
		Text:    "Hi Alice",
	}
}

func addrs(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(r *Request)
		check  func(t *testing.T, m *Message)
	}{
		{"the smallest request", func(r *Request) {}, func(t *testing.T, m *Message) {
			want := mail.Address{Name: "Acme", Address: "news@example.com"}
			if m.From != want {
				t.Errorf("From = %+v, want %+v", m.From, want)
			}
			if got := m.Recipients(); !reflect.DeepEqual(got, []string{"alice@example.org"}) {
				t.Errorf("Recipients() = %q", got)
			}
		}},
		{"a subdomain of the key's domain", func(r *Request) { r.From = "news@mail.Example.COM" }, func(t *testing.T, m *Message) {
			if m.From.Address != "news@mail.example.com" {
				t.Errorf("From = %q, want the domain lower-cased", m.From.Address)
			}
		}},
		{"internationalised domains become punycode", func(r *Request) {
			r.To = []string{"Jörg <joerg@Bücher.Example>"}
		}, func(t *testing.T, m *Message) {
			want := mail.Address{Name: "Jörg", Address: "joerg@xn--bcher-kva.example"}
			if !reflect.DeepEqual(m.To, []mail.Address{want}) {
				t.Errorf("To = %+v, want %+v", m.To, want)
			}
		}},
		{"an RFC 2047 display name is decoded", func(r *Request) {
			r.To = []string{"=?utf-8?q?Caf=C3=A9?= <cafe@example.org>"}
		}, func(t *testing.T, m *Message) {
			if m.To[0].Name != "Café" {
				t.Errorf("name = %q, want Café", m.To[0].Name)
			}
		}},
		{"repeated recipients are kept once, first in to, cc, bcc", func(r *Request) {
			r.To = []string{"a@x.example", "Again <A@X.EXAMPLE>"}
			r.Cc = []string{"a@x.example", "b@x.example"}
			r.Bcc = []string{"B@x.example", "c@x.example", "a@X.example"}
		}, func(t *testing.T, m *Message) {
			got := [][]mail.Address{m.To, m.Cc, m.Bcc}
			want := [][]mail.Address{{{Address: "a@x.example"}}, {{Address: "b@x.example"}}, {{Address: "c@x.example"}}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("to, cc, bcc = %+v, want %+v", got, want)
			}
			if r := m.Recipients(); !reflect.DeepEqual(r, []string{"a@x.example", "b@x.example", "c@x.example"}) {
				t.Errorf("Recipients() = %q", r)
			}
		}},
		{"50 recipients in to, cc and bcc together", func(r *Request) {
			r.To, r.Cc, r.Bcc = addrs(20, "to%d@x.example"), addrs(20, "cc%d@x.example"), addrs(10, "bcc%d@x.example")
		}, func(t *testing.T, m *Message) {
			if n := len(m.Recipients()); n != 50 {
				t.Errorf("%d recipients, want 50", n)
			}
		}},
		{"51 entries of which two are the same address", func(r *Request) {
			r.To, r.Cc = addrs(50, "to%d@x.example"), []string{"TO7@x.example"}
		}, func(t *testing.T, m *Message) {
			if n := len(m.Recipients()); n != 50 {
				t.Errorf("%d recipients, want 50", n)
			}
		}},
		{"bcc only", func(r *Request) { r.To, r.Bcc = nil, []string{"hidden@x.example"} }, func(t *testing.T, m *Message) {
			if len(m.To) != 0 || len(m.Bcc) != 1 {
				t.Errorf("to %v, bcc %v", m.To, m.Bcc)
			}
		}},
		{"html only, a 998-character subject", func(r *Request) {
			r.Text, r.HTML, r.Subject = "", "<p>Hi</p>", strings.Repeat("é", 998)
		}, func(t *testing.T, m *Message) {
			if m.HTML != "<p>Hi</p>" || m.Text != "" {
				t.Errorf("text %q html %q", m.Text, m.HTML)
			}
		}},
		{"allowed headers, canonical and sorted", func(r *Request) {
			r.Headers = map[string]string{
				"x-campaign": "spring", "list-unsubscribe": "<mailto:unsub@example.com>",
				"LIST-UNSUBSCRIBE-POST": "List-Unsubscribe=One-Click", "In-Reply-To": "<a@b.example>",
				"references": "<a@b.example> <c@d.example>", "X-Note": "déjà vu",
			}
		}, func(t *testing.T, m *Message) {
			want := []Header{
				{"In-Reply-To", "<a@b.example>"},
				{"List-Unsubscribe", "<mailto:unsub@example.com>"},
				{"List-Unsubscribe-Post", "List-Unsubscribe=One-Click"},
				{"References", "<a@b.example> <c@d.example>"},
				{"X-Note", "déjà vu"},
				{"x-campaign", "spring"},
			}
			if !reflect.DeepEqual(m.Headers, want) {
				t.Errorf("Headers = %q, want %q", m.Headers, want)
			}
		}},
		{"attachments are decoded, content types normalised", func(r *Request) {
			r.Attachments = []Attachment{
				{Filename: "report.pdf", Content: base64.StdEncoding.EncodeToString([]byte("%PDF-1.4")), ContentType: ""},
				{Filename: "notes été.txt", Content: "", ContentType: "Text/Plain; Charset=utf-8; name=evil.exe"},
			}
		}, func(t *testing.T, m *Message) {
			want := []DecodedAttachment{
				{Filename: "report.pdf", ContentType: "application/octet-stream", Content: []byte("%PDF-1.4")},
				{Filename: "notes été.txt", ContentType: "text/plain; charset=utf-8", Content: []byte{}},
			}
			if !reflect.DeepEqual(m.Attachments, want) {
				t.Errorf("Attachments = %+v, want %+v", m.Attachments, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.change(&r)
			m, errs := Validate(r, testDomain)
			if errs != nil {
				t.Fatalf("Validate: %v", errs)
			}
			tt.check(t, m)
		})
	}
}

func TestValidateRejects(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("data"))
	tests := []struct {
		name string
		// change makes the request invalid.
		change func(r *Request)
		// want is every error, in order, with a part of its message.
		want []FieldError
	}{
		{"no from", func(r *Request) { r.From = "" }, []FieldError{{"body.from", "empty"}}},
		{"from outside the key's domain", func(r *Request) { r.From = "news@example.org" },
			[]FieldError{{"body.from", "must be example.com or one of its subdomains"}}},
		{"from at a name that merely ends like the domain", func(r *Request) { r.From = "news@badexample.com" },
			[]FieldError{{"body.from", "must be example.com"}}},
		{"from at the domain under another one", func(r *Request) { r.From = "news@example.com.evil.example" },
			[]FieldError{{"body.from", "must be example.com"}}},
		{"from with a line break in its display name", func(r *Request) { r.From = "Acme\r\nBcc: victim@x.example <news@example.com>" },
			[]FieldError{{"body.from", "line break"}}},
		{"from with an encoded line break in its display name", func(r *Request) { r.From = "=?utf-8?b?QWNtZQ0KQmNjOiB2QHguZXhhbXBsZQ==?= <news@example.com>" },
			[]FieldError{{"body.from", "display name contains a line break"}}},
		{"a display name with a bare LF", func(r *Request) { r.To = []string{"Al\nice <alice@example.org>"} },
			[]FieldError{{"body.to[0]", "line break"}}},
		{"the fourth recipient is no address", func(r *Request) {
			r.To = []string{"a@x.example", "b@x.example", "c@x.example", "not an address"}
		}, []FieldError{{"body.to[3]", "not an email address"}}},
		{"two addresses in one entry", func(r *Request) { r.To = []string{"a@x.example, b@x.example"} },
			[]FieldError{{"body.to[0]", "one address per entry"}}},
		{"a quoted local part", func(r *Request) { r.Cc = []string{`"a b"@x.example`} },
			[]FieldError{{"body.cc[0]", "quoted or internationalised local parts are not supported"}}},
		{"a non-ASCII local part", func(r *Request) { r.Bcc = []string{"jörg@x.example"} },
			[]FieldError{{"body.bcc[0]", "not supported"}}},
		{"an address literal", func(r *Request) { r.To = []string{"a@[192.0.2.1]"} },
			[]FieldError{{"body.to[0]", "address literals"}}},
		{"a single-label domain", func(r *Request) { r.To = []string{"root@localhost"} },
			[]FieldError{{"body.to[0]", "single label"}}},
		{"localhost", func(r *Request) { r.To = []string{"root@mail.localhost"} },
			[]FieldError{{"body.to[0]", "local machine"}}},
		{"an IPv4-like domain", func(r *Request) { r.To = []string{"a@192.0.2.1"} },
			[]FieldError{{"body.to[0]", "IP address"}}},
		{"a domain with an underscore", func(r *Request) { r.To = []string{"a@x_y.example"} },
			[]FieldError{{"body.to[0]", "the domain after @"}}},
		{"a 65-character local part", func(r *Request) { r.To = []string{strings.Repeat("a", 65) + "@x.example"} },
			[]FieldError{{"body.to[0]", "maximum is 64"}}},
		{"51 recipients over to and cc", func(r *Request) { r.To, r.Cc = addrs(30, "to%d@x.example"), addrs(21, "cc%d@x.example") },
			[]FieldError{{"body.cc", "51 distinct recipients"}}},
		{"51 recipients in bcc", func(r *Request) { r.To, r.Bcc = nil, addrs(51, "b%d@x.example") },
			[]FieldError{{"body.bcc", "the maximum is 50"}}},
		{"51 recipients in to", func(r *Request) { r.To = addrs(51, "b%d@x.example") },
			[]FieldError{{"body.to", "the maximum is 50"}}},
		{"no recipient", func(r *Request) { r.To = nil }, []FieldError{{"body.to", "at least one recipient"}}},
		{"an empty recipient", func(r *Request) { r.To = []string{" "} }, []FieldError{{"body.to[0]", "empty"}}},
		{"a bad reply-to", func(r *Request) { r.ReplyTo = []string{"ok@x.example", "nope"} },
			[]FieldError{{"body.reply_to[1]", "not an email address"}}},
		{"an empty subject", func(r *Request) { r.Subject = "" }, []FieldError{{"body.subject", "empty"}}},
		{"a blank subject", func(r *Request) { r.Subject = "   " }, []FieldError{{"body.subject", "empty"}}},
		{"a subject with CRLF", func(r *Request) { r.Subject = "Hi\r\nBcc: victim@x.example" },
			[]FieldError{{"body.subject", "line break"}}},
		{"a subject with LF", func(r *Request) { r.Subject = "Hi\nthere" }, []FieldError{{"body.subject", "line break"}}},
		{"a subject with CR", func(r *Request) { r.Subject = "Hi\rthere" }, []FieldError{{"body.subject", "line break"}}},
		{"a subject with a tab", func(r *Request) { r.Subject = "Hi\tthere" }, []FieldError{{"body.subject", "control character"}}},
		{"a subject with NEL", func(r *Request) { r.Subject = "Hi\u0085there" }, []FieldError{{"body.subject", "control character"}}},
		{"a 999-character subject", func(r *Request) { r.Subject = strings.Repeat("s", 999) },
			[]FieldError{{"body.subject", "999 characters long; the maximum is 998"}}},
		{"a subject that is not UTF-8", func(r *Request) { r.Subject = "\xff" }, []FieldError{{"body.subject", "UTF-8"}}},
		{"no text and no html", func(r *Request) { r.Text, r.HTML = "", "" },
			[]FieldError{{"body.text", "at least one of text and html"}}},
		{"51 headers", func(r *Request) {
			r.Headers = map[string]string{}
			for i := range MaxHeaders + 1 {
				r.Headers[fmt.Sprintf("X-H%d", i)] = "v"
			}
		}, []FieldError{{"body.headers", "51 headers; the maximum is 50"}}},
		{"17 KiB of headers", func(r *Request) {
			r.Headers = map[string]string{}
			for i := range 20 {
				r.Headers[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", 870)
			}
		}, []FieldError{{"body.headers", "the maximum is 16384"}}},
		{"a Bcc header", func(r *Request) { r.Headers = map[string]string{"Bcc": "victim@x.example"} },
			[]FieldError{{"body.headers.Bcc", "only X- headers"}}},
		{"a From header", func(r *Request) { r.Headers = map[string]string{"from": "ceo@example.com"} },
			[]FieldError{{"body.headers.from", "only X- headers"}}},
		{"a DKIM-Signature header", func(r *Request) { r.Headers = map[string]string{"DKIM-Signature": "v=1"} },
			[]FieldError{{"body.headers.DKIM-Signature", "only X- headers"}}},
		{"a Content-Type header", func(r *Request) { r.Headers = map[string]string{"Content-Type": "text/html"} },
			[]FieldError{{"body.headers.Content-Type", "only X- headers"}}},
		{"the bare prefix X-", func(r *Request) { r.Headers = map[string]string{"X-": "v"} },
			[]FieldError{{"body.headers.X-", "only X- headers"}}},
		{"a header name with a space", func(r *Request) { r.Headers = map[string]string{"X-My Header": "v"} },
			[]FieldError{{"body.headers.X-My Header", "no spaces, colons or brackets"}}},
		{"a header name with a colon", func(r *Request) { r.Headers = map[string]string{"X-A:": "v"} },
			[]FieldError{{"body.headers.X-A:", "no spaces, colons or brackets"}}},
		{"a header name with a line break", func(r *Request) { r.Headers = map[string]string{"X-A\r\nBcc": "v"} },
			[]FieldError{{"body.headers.X-A\r\nBcc", "no spaces, colons or brackets"}}},
		// Printable, but not a token character: net/textproto, which the
		// signing reads the message with, refuses the field, and the email
		// stayed queued for ever.
		{"a header name with brackets", func(r *Request) { r.Headers = map[string]string{"X-Order(1)": "v"} },
			[]FieldError{{"body.headers.X-Order(1)", "no spaces, colons or brackets"}}},
		{"a header name with a slash", func(r *Request) { r.Headers = map[string]string{"X-a/b": "v"} },
			[]FieldError{{"body.headers.X-a/b", "no spaces, colons or brackets"}}},
		// Checked here, so that each entry is named beside the request's
		// other problems: the schema named the field alone.
		{"51 entries in one field", func(r *Request) { r.Cc = append(addrs(50, "cc%d@x.example"), "more@x.example") },
			[]FieldError{{"body.cc", "the maximum is 50 in one field"}}},
		{"a 999-character entry", func(r *Request) { r.To = []string{"a@x.example", strings.Repeat("n", 985) + " <b@x.example>"} },
			[]FieldError{{"body.to[1]", "the maximum is 998"}}},
		{"a subject with a line separator", func(r *Request) { r.Subject = "Hello\u2028Bcc: x@y.example" },
			[]FieldError{{"body.subject", "line break"}}},
		{"a display name with a paragraph separator", func(r *Request) { r.To = []string{"Ada\u2029Lovelace <ada@example.org>"} },
			[]FieldError{{"body.to[0]", "line break"}}},
		{"a header value with a line separator", func(r *Request) { r.Headers = map[string]string{"X-Tag": "a\u2028b"} },
			[]FieldError{{"body.headers.X-Tag", "line break"}}},
		{"an attachment type without a subtype", func(r *Request) {
			r.Attachments = []Attachment{{Filename: "a.bin", Content: "YQ==", ContentType: "multipart"}}
		}, []FieldError{{"body.attachments[0].content_type", "a type and a subtype"}}},
		{"a header value with CRLF", func(r *Request) { r.Headers = map[string]string{"X-Tag": "a\r\nBcc: victim@x.example"} },
			[]FieldError{{"body.headers.X-Tag", "line break"}}},
		{"a header value with NUL", func(r *Request) { r.Headers = map[string]string{"X-Tag": "a\x00b"} },
			[]FieldError{{"body.headers.X-Tag", "control character"}}},
		{"an empty header value", func(r *Request) { r.Headers = map[string]string{"X-Tag": ""} },
			[]FieldError{{"body.headers.X-Tag", "empty"}}},
		{"a non-ASCII List-Unsubscribe", func(r *Request) { r.Headers = map[string]string{"List-Unsubscribe": "<https://ü.example/u>"} },
			[]FieldError{{"body.headers.List-Unsubscribe", "must be ASCII"}}},
		{"a header word too long for a line", func(r *Request) {
			r.Headers = map[string]string{"List-Unsubscribe": "<https://x.example/" + strings.Repeat("u", 1000) + ">"}
		}, []FieldError{{"body.headers.List-Unsubscribe", "too long for one header line"}}},
		{"one header twice", func(r *Request) { r.Headers = map[string]string{"X-Tag": "a", "x-tag": "b"} },
			[]FieldError{{"body.headers.x-tag", "also given as X-Tag"}}},
		{"broken base64", func(r *Request) { r.Attachments = []Attachment{{Filename: "a.txt", Content: "not base64!"}} },
			[]FieldError{{"body.attachments[0].content", "not valid base64"}}},
		{"URL-safe base64", func(r *Request) { r.Attachments = []Attachment{{Filename: "a.txt", Content: "-_-_"}} },
			[]FieldError{{"body.attachments[0].content", "not valid base64"}}},
		{"an empty filename", func(r *Request) { r.Attachments = []Attachment{{Filename: "", Content: b64}} },
			[]FieldError{{"body.attachments[0].filename", "empty"}}},
		{"a filename with CRLF", func(r *Request) {
			r.Attachments = []Attachment{{Filename: "a.txt", Content: b64}, {Filename: "b\r\n.txt", Content: b64}}
		}, []FieldError{{"body.attachments[1].filename", "line break"}}},
		{"a 256-byte filename", func(r *Request) {
			r.Attachments = []Attachment{{Filename: strings.Repeat("f", 252) + ".txt", Content: b64}}
		},
			[]FieldError{{"body.attachments[0].filename", "the maximum is 255"}}},
		{"a content type that is no media type", func(r *Request) {
			r.Attachments = []Attachment{{Filename: "a", Content: b64, ContentType: "pdf please"}}
		}, []FieldError{{"body.attachments[0].content_type", "not a media type"}}},
		{"a content type with CRLF", func(r *Request) {
			r.Attachments = []Attachment{{Filename: "a", Content: b64, ContentType: "text/plain\r\nBcc: v@x.example"}}
		}, []FieldError{{"body.attachments[0].content_type", "line break"}}},
		{"a multipart content type", func(r *Request) {
			r.Attachments = []Attachment{{Filename: "a", Content: b64, ContentType: "multipart/mixed; boundary=x"}}
		}, []FieldError{{"body.attachments[0].content_type", "cannot be attachments"}}},
		{"every field wrong at once", func(r *Request) {
			*r = Request{
				From:        "news@elsewhere.example",
				To:          []string{"ok@x.example", "bad"},
				Subject:     "",
				Headers:     map[string]string{"Bcc": "v@x.example", "X-Ok": "fine"},
				Attachments: []Attachment{{Filename: "", Content: "%%%"}},
			}
		}, []FieldError{
			{"body.from", "must be example.com"},
			{"body.to[1]", "not an email address"},
			{"body.subject", "empty"},
			{"body.text", "at least one of text and html"},
			{"body.headers.Bcc", "only X- headers"},
			{"body.attachments[0].filename", "empty"},
			{"body.attachments[0].content", "not valid base64"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.change(&r)
			m, errs := Validate(r, testDomain)
			if m != nil {
				t.Errorf("Validate returned a message with errors %v", errs)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("errors = %v, want %d: %v", errs, len(tt.want), tt.want)
			}
			for i, want := range tt.want {
				got := errs[i]
				if got.Location != want.Location || !strings.Contains(got.Message, want.Message) {
					t.Errorf("error %d = %q at %q, want %q at %q", i, got.Message, got.Location, want.Message, want.Location)
				}
			}
		})
	}
}

// Error messages go back to the API caller and may end up in logs: they must
// not carry the address, subject or header value they are about.
func TestValidateErrorsDoNotRepeatValues(t *testing.T) {
	r := Request{
		From:    "Secret Name <secret.sender@elsewhere.example>",
		To:      []string{"secret.recipient@x_y.example", "Secret Person\n <p@x.example>"},
		Subject: "Secret subject\n",
		Text:    "x",
		Headers: map[string]string{"X-Secret": "secret\nvalue"},
	}
	_, errs := Validate(r, testDomain)
	if len(errs) != 5 {
		t.Fatalf("errors = %v, want 5", errs)
	}
	for _, e := range errs {
		if strings.Contains(strings.ToLower(e.Message), "secret") {
			t.Errorf("error at %s repeats the value: %q", e.Location, e.Message)
		}
	}
}
