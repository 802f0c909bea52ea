package tracking_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/trackhtml"
	"github.com/mailyard/mailyard/internal/tracking"
	"github.com/mailyard/mailyard/internal/tracktoken"
)

const base = "https://t.mailyard.test"

// TestPersonalizeCapsLinksPerEmail: the cap on links is for the whole email,
// however many HTML parts it has. Seven parts of 10,000 links each once took
// link indexes past what a token holds, and the whole email lost its
// tracking and its List-Unsubscribe.
func TestPersonalizeCapsLinksPerEmail(t *testing.T) {
	const parts = 7
	var b strings.Builder
	b.WriteString("From: shop@shop.example\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n")
	for p := range parts {
		b.WriteString("--b\r\nContent-Type: text/html\r\n\r\n")
		for i := range trackhtml.MaxLinks {
			fmt.Fprintf(&b, "<a href=\"https://x.example/%d/%d\">x</a>\r\n", p, i)
		}
	}
	b.WriteString("--b--\r\n")

	l := links(t)
	id := uuid.New()
	p, err := l.Personalize([]byte(b.String()), base, tracking.Settings{Clicks: true, Unsubscribe: true}, id, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Links) != trackhtml.MaxLinks || p.Links[0] != "https://x.example/0/0" || p.Links[trackhtml.MaxLinks-1] != fmt.Sprintf("https://x.example/0/%d", trackhtml.MaxLinks-1) {
		t.Fatalf("%d links, want the %d of the first part", len(p.Links), trackhtml.MaxLinks)
	}
	msg := string(p.Message)
	if !strings.HasPrefix(msg, "List-Unsubscribe: <"+base+"/t/u/") {
		t.Error("no List-Unsubscribe")
	}
	clicks := regexp.MustCompile(`href="`+regexp.QuoteMeta(base)+`/t/c/([a-z0-9]+)"`).FindAllStringSubmatch(msg, -1)
	if len(clicks) != trackhtml.MaxLinks {
		t.Fatalf("%d links rewritten, want %d", len(clicks), trackhtml.MaxLinks)
	}
	last, err := l.Keys.Parse(tracktoken.Click, clicks[len(clicks)-1][1])
	if err != nil || last.Link != trackhtml.MaxLinks-1 || last.Recipient != 3 || last.EmailID != id {
		t.Errorf("the last click token: %+v, %v", last, err)
	}
	if !strings.Contains(msg, "\r\n<a href=\"https://x.example/1/0\">x</a>\r\n") {
		t.Error("a link of the second part was rewritten")
	}
}

// TestPersonalizeKeepsOwnListUnsubscribe: a message with a List-Unsubscribe
// or a List-Unsubscribe-Post of its own gets neither of Mailyard's, however
// unusual the rest of its header; only its body placeholder is replaced.
func TestPersonalizeKeepsOwnListUnsubscribe(t *testing.T) {
	const body = "Content-Type: text/plain; charset=utf-8\r\n\r\nBye {{unsubscribe_url}}\r\n"
	for name, head := range map[string]string{
		"ISO-2022-JP bytes in a value": "Subject: \x1b$B$3$s$K$A$O\x1b(B\r\nList-Unsubscribe: <mailto:u@shop.example>\r\n",
		"a name that is no token":      "X-Tag(1): a\r\nlist-unsubscribe: <https://shop.example/u>\r\n",
		"a folded value":               "List-Unsubscribe:\r\n <https://shop.example/u>\r\nFrom: shop@shop.example\r\n",
		"only List-Unsubscribe-Post":   "From: shop@shop.example\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n",
	} {
		raw := head + body
		p, err := links(t).Personalize([]byte(raw), base, tracking.Settings{Unsubscribe: true}, uuid.New(), 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := string(p.Message)
		if !strings.HasPrefix(got, head) || strings.Count(strings.ToLower(got), "list-unsubscribe") != strings.Count(strings.ToLower(head), "list-unsubscribe") {
			t.Errorf("%s: fields added:\n%s", name, got)
		}
		if strings.Contains(got, "{{unsubscribe_url}}") || !strings.Contains(got, "Bye "+base+"/t/u/") {
			t.Errorf("%s: the body placeholder is not replaced:\n%s", name, got)
		}
	}

	// Without one of its own, the message gets both.
	raw := "From: shop@shop.example\r\n" + body
	p, err := links(t).Personalize([]byte(raw), base, tracking.Settings{Unsubscribe: true}, uuid.New(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.Message); !strings.HasPrefix(got, "List-Unsubscribe: <"+base+"/t/u/") ||
		!strings.Contains(got, "\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\nFrom: shop@shop.example\r\n") {
		t.Errorf("no fields added:\n%s", got)
	}
}

// TestPersonalizeKeepsPartsWithinTheirEncoding: a tracked tag keeps a part
// declared US-ASCII (or without a charset) ASCII, writing the characters its
// references decode to back as references (before, "Caf&eacute;" became
// raw UTF-8, shown as "CafÃ©"); and a longer click URL that pushes a line of
// a binary part past 998 octets makes the part quoted-printable, as for
// 8bit (before, the line went out as it was).
func TestPersonalizeKeepsPartsWithinTheirEncoding(t *testing.T) {
	for name, part := range map[string]string{
		"no charset": "Content-Type: text/html\r\n\r\n<a href=\"https://x.example/a\" title=\"Caf&eacute;&nbsp;\">x</a>\r\n",
		"us-ascii":   "Content-Type: text/html; charset=us-ascii\r\n\r\n<a href=\"https://x.example/a\" title=\"Caf&eacute;\">x</a>\r\n",
		"binary": "Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
			strings.Repeat("w", 960) + "<a href=\"https://x.example/a\">x</a>\r\n",
	} {
		p, err := links(t).Personalize([]byte("From: shop@shop.example\r\n"+part), base, tracking.Settings{Clicks: true}, uuid.New(), 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		msg := string(p.Message)
		if len(p.Links) != 1 {
			t.Errorf("%s: links %v, want the one", name, p.Links)
		}
		// Quoted-printable would hide raw UTF-8 as "=C3=A9": the part must
		// stay unencoded, with its character as a reference.
		if strings.ContainsFunc(msg, func(r rune) bool { return r >= 0x80 }) ||
			name != "binary" && (strings.Contains(msg, "quoted-printable") || !strings.Contains(msg, `title="Caf&#233;`)) {
			t.Errorf("%s: non-ASCII written into the part:\n%s", name, msg)
		}
		for _, line := range strings.Split(msg, "\r\n") {
			if len(line) > 998 {
				t.Errorf("%s: a line of %d octets", name, len(line))
			}
		}
		if name == "binary" && !strings.Contains(msg, "Content-Transfer-Encoding: quoted-printable\r\n") {
			t.Errorf("binary: not re-encoded:\n%s", msg)
		}
	}
}
