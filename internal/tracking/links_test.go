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
