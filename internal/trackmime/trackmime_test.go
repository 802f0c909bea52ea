package trackmime

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"mime/quotedprintable"
	"slices"
	"strings"
	"testing"
)

const unsubURL = "https://t.example/u/r1"

// track stands in for trackhtml: it replaces the placeholder in both kinds
// of part and marks HTML ones.
func track(body []byte, part Part) ([]byte, error) {
	out := bytes.ReplaceAll(body, []byte("{{unsubscribe_url}}"), []byte(unsubURL))
	if part.HTML {
		out = append(out, "<img src=x>"...)
	}
	return out, nil
}

func identity(body []byte, _ Part) ([]byte, error) { return body, nil }

func qp(s string) string {
	var b bytes.Buffer
	writeQP(&b, []byte(s))
	return b.String()
}

func unqp(t *testing.T, s string) string {
	t.Helper()
	b, err := io.ReadAll(quotedprintable.NewReader(strings.NewReader(s)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// TestMixedAlternative: a message as a mail client builds it. Only the two
// bodies of the alternative change; every other byte stays.
func TestMixedAlternative(t *testing.T) {
	text := crlf("Hello Ana,\nunsubscribe: {{unsubscribe_url}}\nGrüße, a long line " + strings.Repeat("é", 60))
	html := crlf(`<p>Hello <b>Ana</b>, <a href="https://x.example/?a=1&amp;b=2">shop</a></p>` + "\n" + `<a href="{{unsubscribe_url}}">unsubscribe</a> ` + strings.Repeat("ü", 50))
	attachment := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0, 1, 2, 0xff}, 100))
	head := crlf(`Received: from x by y; Mon, 1 Jan 2024 00:00:00 +0000
From: "Shop" <news@shop.example>
To: ana@x.example
Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=
MIME-Version: 1.0
Content-Type: multipart/mixed;
 boundary="outer"

This is a multi-part message in MIME format.
--outer
Content-Type: multipart/alternative; boundary=inner

--inner
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: quoted-printable

`)
	mid := crlf(`
--inner
Content-Type: text/html; charset="UTF-8"
Content-Transfer-Encoding: Quoted-Printable

`)
	tail := crlf(`
--inner--

--outer
Content-Type: application/pdf; name=a.pdf
Content-Disposition: attachment; filename=a.pdf
Content-Transfer-Encoding: base64

` + attachment + `
--outer
Content-Type: text/html; charset=utf-8
Content-Disposition: attachment; filename="page.html"

<a href="https://x.example/">{{unsubscribe_url}}</a>
--outer
Content-Type: text/plain; charset=utf-16
Content-Transfer-Encoding: base64

//5IAGkA
--outer--
epilogue {{unsubscribe_url}}
`)
	in := head + qp(text) + mid + qp(html) + tail
	out, err := Rewrite([]byte(in), track)
	if err != nil {
		t.Fatal(err)
	}
	newText := strings.ReplaceAll(text, "{{unsubscribe_url}}", unsubURL)
	newHTML := strings.ReplaceAll(html, "{{unsubscribe_url}}", unsubURL) + "<img src=x>"
	want := head + qp(newText) + mid + qp(newHTML) + tail
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	// The non-ASCII text decodes to what the rewrite returned.
	if got := unqp(t, qp(newText)); got != newText {
		t.Errorf("text decodes to %q", got)
	}
	for _, l := range strings.Split(string(out), "\r\n") {
		if len(l) > 998 {
			t.Errorf("line of %d octets", len(l))
		}
	}

	same, err := Rewrite([]byte(in), identity)
	if err != nil || string(same) != in {
		t.Errorf("identity changed the message: %v", err)
	}
}

func TestBase64HTML(t *testing.T) {
	html := strings.Repeat(`<p>{{unsubscribe_url}} `+"\u00e9"+`</p>`+"\r\n", 20)
	enc := base64.StdEncoding.EncodeToString([]byte(html))
	var wrapped strings.Builder
	for len(enc) > 60 { // a different line length from ours, on purpose
		wrapped.WriteString(enc[:60] + "\r\n")
		enc = enc[60:]
	}
	wrapped.WriteString(enc + "\r\n")
	head := "From: a@x.example\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
	out, err := Rewrite([]byte(head+wrapped.String()), track)
	if err != nil {
		t.Fatal(err)
	}
	body, ok := strings.CutPrefix(string(out), head)
	if !ok {
		t.Fatalf("header changed: %q", out)
	}
	lines := strings.Split(body, "\r\n")
	if lines[len(lines)-1] != "" {
		t.Error("final line break lost")
	}
	for _, l := range lines[:len(lines)-2] {
		if len(l) != 76 {
			t.Errorf("line of %d characters", len(l))
		}
	}
	dec, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(body, "\r\n", ""))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := track([]byte(html), Part{HTML: true}); string(dec) != string(want) {
		t.Errorf("decoded %q", dec)
	}
}

// TestSevenBitTooLong: a 7bit or 8bit part whose rewritten line would be
// too long, or 8-bit in 7bit, becomes quoted-printable; only its
// Content-Transfer-Encoding field changes (or is added).
func TestSevenBitTooLong(t *testing.T) {
	long := "<p>" + strings.Repeat("{{unsubscribe_url}} ", 45) + "</p>\r\n<p>short</p>"
	tests := []struct {
		name, head, body, wantHead string
	}{
		{
			name:     "7bit field replaced, folded value included",
			head:     "Content-Type: text/html\r\nContent-Transfer-Encoding:\r\n 7bit\r\nX-After: 1\r\n\r\n",
			body:     long,
			wantHead: "Content-Type: text/html\r\nContent-Transfer-Encoding: quoted-printable\r\nX-After: 1\r\n\r\n",
		},
		{
			name:     "no field: one added at the end of the header",
			head:     "Subject: x\r\nContent-Type: text/html\r\n\r\n",
			body:     long,
			wantHead: "Subject: x\r\nContent-Type: text/html\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n",
		},
		{
			name:     "8bit stays 8bit when the lines fit",
			head:     "Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n",
			body:     "<p>Grüße {{unsubscribe_url}}</p>",
			wantHead: "Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Rewrite([]byte(tt.head+tt.body), track)
			if err != nil {
				t.Fatal(err)
			}
			head, body, _ := strings.Cut(string(out), "\r\n\r\n")
			if head+"\r\n\r\n" != tt.wantHead {
				t.Errorf("header %q", head)
			}
			want, _ := track([]byte(tt.body), Part{HTML: true})
			if strings.Contains(tt.wantHead, "quoted-printable") {
				for _, l := range strings.Split(body, "\r\n") {
					if len(l) > 76 {
						t.Errorf("QP line of %d", len(l))
					}
				}
				body = unqp(t, body)
			}
			if body != string(want) {
				t.Errorf("body %q", body)
			}
		})
	}
}

// TestUntouched: parts that are not the sender's text to rewrite keep their
// bytes even when the rewrite would change them.
func TestUntouched(t *testing.T) {
	for name, m := range map[string]string{
		"utf-16":      "Content-Type: text/html; charset=UTF-16LE\r\n\r\n<\x00a\x00>\x00{{unsubscribe_url}}",
		"iso-2022-jp": "Content-Type: text/plain; charset=iso-2022-jp\r\n\r\n{{unsubscribe_url}}",
		"attachment":  "Content-Type: text/html\r\nContent-Disposition: ATTACHMENT; filename=x.html\r\n\r\n{{unsubscribe_url}}",
		"unknown CTE": "Content-Type: text/plain\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\n{{unsubscribe_url}}",
		"image":       "Content-Type: image/png\r\n\r\n{{unsubscribe_url}}",
		"no body":     "Content-Type: text/plain\r\nSubject: {{unsubscribe_url}}",
		"forwarded":   "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: message/rfc822\r\n\r\nContent-Type: text/plain\r\n\r\n{{unsubscribe_url}}\r\n--b--\r\n",
		"digest":      "Content-Type: multipart/digest; boundary=b\r\n\r\n--b\r\n\r\nSubject: x\r\n\r\n{{unsubscribe_url}}\r\n--b--\r\n",
		// A rewrite would break the signature (S/MIME, OpenPGP), at any depth.
		"signed": "Content-Type: multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha-256; boundary=s\r\n\r\n" +
			"--s\r\nContent-Type: text/html\r\n\r\n<a href=\"https://x.example/\">{{unsubscribe_url}}</a>\r\n" +
			"--s\r\nContent-Type: application/pkcs7-signature\r\n\r\nMIIB\r\n--s--\r\n",
		"signed inside mixed": "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: multipart/signed; protocol=\"application/pgp-signature\"; boundary=s\r\n\r\n" +
			"--s\r\nContent-Type: text/plain\r\n\r\n{{unsubscribe_url}}\r\n--s\r\nContent-Type: application/pgp-signature\r\n\r\nsig\r\n--s--\r\n--b--\r\n",
		"encrypted": "Content-Type: multipart/encrypted; protocol=\"application/pgp-encrypted\"; boundary=e\r\n\r\n" +
			"--e\r\nContent-Type: application/pgp-encrypted\r\n\r\nVersion: 1\r\n--e\r\nContent-Type: text/plain\r\n\r\n{{unsubscribe_url}}\r\n--e--\r\n",
		"look-alike line": "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: image/gif\r\n\r\n--bb\r\n--b \r\n\r\n--b-- \r\n{{unsubscribe_url}}",
	} {
		out, err := Rewrite([]byte(m), track)
		if err != nil || string(out) != m {
			t.Errorf("%s: got %q, %v", name, out, err)
		}
	}
}

// The rewriter learns each part's charset, lower-cased, and whether it is
// UTF-8 (declared so: us-ascii, or no charset at all, is not).
func TestPartCharset(t *testing.T) {
	msg := "Content-Type: multipart/alternative; boundary=b\r\n\r\n" +
		"--b\r\nContent-Type: text/plain\r\n\r\nplain\r\n" +
		"--b\r\nContent-Type: text/html; charset=\"GB2312\"\r\n\r\n<p>gb</p>\r\n" +
		"--b\r\nContent-Type: text/html; charset=\" UTF-8 \"\r\n\r\n<p>utf</p>\r\n--b--\r\n"
	var got []Part
	if _, err := Rewrite([]byte(msg), func(body []byte, part Part) ([]byte, error) {
		got = append(got, part)
		return body, nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []Part{{HTML: false, Charset: ""}, {HTML: true, Charset: "gb2312"}, {HTML: true, Charset: "utf-8"}}
	if !slices.Equal(got, want) {
		t.Fatalf("parts %+v, want %+v", got, want)
	}
	if got[0].UTF8() || got[1].UTF8() || !got[2].UTF8() {
		t.Errorf("UTF8() of %+v: %v %v %v", got, got[0].UTF8(), got[1].UTF8(), got[2].UTF8())
	}
}

func TestNested(t *testing.T) {
	// Defaults: a part without Content-Type is text/plain; LF line breaks
	// are read too.
	m := "Content-Type: multipart/mixed; boundary=a\n\npre\n--a\nContent-Type: multipart/related; boundary=b\n\n--b\nContent-Type: multipart/alternative; boundary=c\n\n--c\n\n{{unsubscribe_url}}\n--c\nContent-Type: text/html\n\n<p>{{unsubscribe_url}}</p>\n--c--\n--b--\n--a--\n"
	want := strings.ReplaceAll(m, "<p>{{unsubscribe_url}}</p>", "<p>"+unsubURL+"</p><img src=x>")
	want = strings.ReplaceAll(want, "{{unsubscribe_url}}", unsubURL)
	out, err := Rewrite([]byte(m), track)
	if err != nil || string(out) != want {
		t.Errorf("got %q, %v\nwant %q", out, err, want)
	}
}

func TestErrors(t *testing.T) {
	nest := func(depth int) string {
		var b strings.Builder
		for i := range depth {
			b.WriteString("Content-Type: multipart/mixed; boundary=b" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "\r\n\r\n--b" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "\r\n")
		}
		b.WriteString("\r\nx\r\n")
		for i := depth - 1; i >= 0; i-- {
			b.WriteString("--b" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "--\r\n")
		}
		return b.String()
	}
	if _, err := Rewrite([]byte(nest(MaxDepth)), track); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	many := "Content-Type: multipart/mixed; boundary=b\r\n\r\n" + strings.Repeat("--b\r\n\r\nx\r\n", MaxParts) + "--b--\r\n"
	tests := map[string]struct {
		msg  string
		want error
	}{
		"too deep":           {nest(MaxDepth + 1), ErrTooComplex},
		"too many parts":     {many, ErrTooComplex},
		"no boundary param":  {"Content-Type: multipart/mixed\r\n\r\n--b\r\n\r\nx\r\n--b--\r\n", ErrMalformed},
		"boundary not found": {"Content-Type: multipart/mixed; boundary=b\r\n\r\nx\r\n", ErrMalformed},
		"no closing line":    {"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nx\r\n", ErrMalformed},
		"bad base64":         {"Content-Type: text/html\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!!\r\n", ErrMalformed},
		"bad QP":             {"Content-Type: text/html\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na\x00b\r\n", ErrMalformed},
		"bad Content-Type":   {"Content-Type: text/html; charset\r\n\r\nx", ErrMalformed},
		"two Content-Types":  {"Content-Type: text/plain\r\nContent-Type: text/html\r\n\r\nx", ErrMalformed},
		"header line":        {"From: a\r\nnot a field\r\n\r\nx", ErrMalformed},
		"folded first line":  {" x: y\r\n\r\nx", ErrMalformed},
		"boundary in output": {"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\n{{unsubscribe_url}}\r\n--b--\r\n", ErrMalformed},
	}
	for name, tt := range tests {
		fn := track
		if name == "boundary in output" {
			fn = func(body []byte, _ Part) ([]byte, error) { return []byte("x\r\n--b\r\ny"), nil }
		}
		if _, err := Rewrite([]byte(tt.msg), fn); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", name, err, tt.want)
		}
	}
	boom := errors.New("boom")
	if _, err := Rewrite([]byte("\r\nx"), func([]byte, Part) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("the rewriter's error: got %v", err)
	}
}

func TestPrependFields(t *testing.T) {
	out, err := PrependFields([]byte("From: a@x.example\r\n\r\nbody"), "List-Unsubscribe: <https://t.example/u>", "List-Unsubscribe-Post: List-Unsubscribe=One-Click")
	want := "List-Unsubscribe: <https://t.example/u>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\nFrom: a@x.example\r\n\r\nbody"
	if err != nil || string(out) != want {
		t.Errorf("got %q, %v", out, err)
	}
	for _, f := range []string{"X: a\r\nBcc: v@x.example", "X: a\n", "no colon", ": empty name", "Bad Name: x", "X: " + strings.Repeat("a", 999)} {
		if _, err := PrependFields(nil, f); err == nil {
			t.Errorf("%q accepted", f)
		}
	}
}

// bigMessage is about 10 MiB: an alternative of a QP text and a QP HTML
// body, each about 4 MiB, and a base64 attachment.
func bigMessage() []byte {
	para := "<p>Some text with a <a href=\"https://x.example/\">link</a> and {{unsubscribe_url}} in it, Grüße.</p>\r\n"
	html := strings.Repeat(para, 4<<20/len(para))
	return []byte("Content-Type: multipart/mixed; boundary=m\r\n\r\n--m\r\nContent-Type: multipart/alternative; boundary=a\r\n\r\n--a\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n" + qp(html) +
		"\r\n--a\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n" + qp(html) +
		"\r\n--a--\r\n--m\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
		base64.StdEncoding.EncodeToString(make([]byte, 1<<20)) + "\r\n--m--\r\n")
}

func TestBigMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("10 MiB message")
	}
	// Its speed is BenchmarkRewrite's to measure; here, that the whole of a
	// message this size is rewritten and stays well formed.
	out, err := Rewrite(bigMessage(), track)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := collect(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 {
		t.Fatalf("%d text parts after the rewrite, want 2", len(bodies))
	}
	for i, body := range bodies {
		if bytes.Contains(body, []byte("{{unsubscribe_url}}")) || !bytes.Contains(body, []byte(unsubURL)) {
			t.Errorf("text part %d: the placeholder is not replaced throughout", i)
		}
	}
	if !bytes.HasSuffix(bytes.TrimRight(bodies[1], "\r\n"), []byte("<img src=x>")) {
		t.Error("the HTML part was not handed to the rewriter whole")
	}
}

func BenchmarkRewrite(b *testing.B) {
	in := bigMessage()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Rewrite(in, track); err != nil {
			b.Fatal(err)
		}
	}
}
