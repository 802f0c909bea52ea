package trackhtml

import (
	"bytes"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// fuzzSeeds are realistic emails and nasty fragments.
var fuzzSeeds = []string{
	`<!DOCTYPE html><html><head><meta charset="utf-8"><title>News {{unsubscribe_url}}</title>
<style>a{color:red} /* </body> */</style></head>
<body style="margin:0"><table role="presentation" width="100%"><tr><td>
<h1>Hello, Ana</h1><p>Our <a href="https://shop.example/sale?utm_source=mail&amp;utm_medium=email" target="_blank">spring sale</a> starts now.</p>
<!--[if mso]><v:roundrect href="https://shop.example/sale"><![endif]-->
<a href="https://shop.example/sale?utm_source=mail&amp;utm_medium=email" class=button>Shop</a>
<p><a href="mailto:help@shop.example">Write to us</a> or call <a href="tel:+15550100">us</a>.</p>
<p><a href="{{unsubscribe_url}}">Unsubscribe</a> · <a href="https://shop.example/prefs" data-mailyard-track="false">Preferences</a></p>
</td></tr></table></body></html>`,
	"<html>\r\n<body>\r\n<p>Plain {{unsubscribe_url}} text &amp; more</p>\r\n<A HREF=HTTP://X.EXAMPLE/A?b=1&c=2>x</A>\r\n</BODY>\r\n</HTML>\r\n",
	`<a href="jav&#x09;ascript:alert(1)">j</a><a href=" javascript:x">k</a><a href="&#x6A;avascript:x">l</a><a href="data:text/html,<b>">d</a>`,
	`<script><a href="https://x.example/">{{unsubscribe_url}}</script><textarea><a href="https://x.example/"></textarea><plaintext><a href="https://x.example/">`,
	`<a href='https://x.example/"quoted"' title="{{unsubscribe_url}}" href="https://y.example/">x</a><a href=https://x.example/ />`,
	`<p>unclosed <!-- comment <a href="https://x.example/">`,
	`<a href="https://x.example/&#0;&#xD800;&nbsp" x="&amp`,
	"<a href=\"https://x.example/\x00\">nul</a>\x00<a\x00 href=https://y.example>",
	`<img src="https://t.example/o/r1?a=1&amp;b=2" width="1" height="1" alt="">`,
	`<a =href="https://x.example/" href = "https://y.example/"><a/href="https://z.example/">`,
	`<p>{{unsubscribe_url}}</p><title/>{{unsubscribe_url}}</title><script/><a href="https://x.example/">{{unsubscribe_url}}`,
	`<TEXTAREA a="b"/>{{unsubscribe_url}}</textarea><style/>/* {{unsubscribe_url}}`,
}

// FuzzRewrite checks that for any input Rewrite does not fail, and that
// tokenizing its output gives the input's tokens with exactly the promised
// changes: trackable hrefs replaced by their click URL, placeholders
// replaced, and one pixel added.
func FuzzRewrite(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p := Params{ClickURL: clickURL, PixelURL: pixelURL, UnsubscribeURL: unsubURL}
		res, err := Rewrite(in, p)
		if err != nil {
			t.Fatal(err)
		}
		bare, err := Rewrite(in, Params{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bare.HTML, in) {
			t.Fatalf("Params{} changed the input:\n%q\n%q", in, bare.HTML)
		}
		// A part in another charset goes through the Private Use Area
		// and comes back byte for byte.
		if legacy, err := Rewrite(in, Params{NotUTF8: true}); err != nil || !bytes.Equal(legacy.HTML, in) {
			t.Fatalf("Params{NotUTF8: true} changed the input (%v):\n%q\n%q", err, in, legacy.HTML)
		}
		if !slices.Equal(res.Links, bare.Links) {
			t.Fatalf("links depend on Params: %q, %q", res.Links, bare.Links)
		}
		checkTokens(t, in, res)
	})
}

type token struct {
	html.Token
	raw     string
	rawText bool // text of a raw-text element
}

func tokenize(b []byte) []token {
	z := html.NewTokenizer(bytes.NewReader(b))
	var toks []token
	inRaw := false
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return toks
		}
		t := token{raw: string(z.Raw()), rawText: inRaw && tt == html.TextToken}
		t.Token = z.Token()
		switch tt {
		case html.StartTagToken, html.SelfClosingTagToken:
			// <script/> opens a script for the tokenizer, as <script> does.
			inRaw = isRawText(t.Data)
		case html.EndTagToken:
			inRaw = false
		}
		toks = append(toks, t)
	}
}

func checkTokens(t *testing.T, in []byte, res Result) {
	t.Helper()
	want := tokenize(in)
	got := tokenize(res.HTML)
	pixel := html.Token{Type: html.StartTagToken, DataAtom: 0, Data: "img", Attr: []html.Attribute{
		{Key: "src", Val: pixelURL}, {Key: "width", Val: "1"}, {Key: "height", Val: "1"}, {Key: "alt"},
	}}
	var links []string
	pixels := 0
	i := 0
	for _, w := range want {
		exp := expected(t, w, &links)
		if i < len(got) && !equalToken(got[i].Token, exp) && equalToken(got[i].Token, pixel) {
			i++
			pixels++
		}
		if i >= len(got) {
			t.Fatalf("output ends early, want %v\nin:  %q\nout: %q", exp, in, res.HTML)
		}
		if !equalToken(got[i].Token, exp) {
			t.Fatalf("token %d: got %v, want %v\nin:  %q\nout: %q", i, got[i].Token, exp, in, res.HTML)
		}
		i++
	}
	if i < len(got) && equalToken(got[i].Token, pixel) {
		i++
		pixels++
	}
	if i != len(got) || pixels != 1 {
		t.Fatalf("%d extra tokens, %d pixels\nin:  %q\nout: %q", len(got)-i, pixels, in, res.HTML)
	}
	if !slices.Equal(links, res.Links) {
		t.Fatalf("links %q, want %q", res.Links, links)
	}
}

// expected returns the token Rewrite should turn w into, adding any new link
// to links.
func expected(t *testing.T, w token, links *[]string) html.Token {
	exp := w.Token
	hasPlaceholder := strings.Contains(w.raw, Placeholder)
	switch w.Type {
	case html.TextToken:
		// The literal placeholders, and only they, become the URL in the
		// decoded text; a sentinel no reference can join stands in for them.
		const sentinel = "\uE000"
		if hasPlaceholder && !w.rawText && !strings.Contains(w.raw, sentinel) {
			r := strings.ReplaceAll(w.raw, Placeholder, sentinel)
			r = strings.ReplaceAll(strings.ReplaceAll(r, "\r\n", "\n"), "\r", "\n")
			exp.Data = strings.ReplaceAll(html.UnescapeString(r), sentinel, unsubURL)
		}
	case html.StartTagToken, html.SelfClosingTagToken:
		exp.Attr = slices.Clone(w.Attr)
		href := -1
		optOut := false
		for i, a := range exp.Attr {
			if a.Key == "href" && href < 0 {
				href = i
			}
			if a.Key == trackAttr && strings.EqualFold(strings.TrimSpace(a.Val), "false") {
				optOut = true
			}
			if hasPlaceholder {
				exp.Attr[i].Val = strings.ReplaceAll(a.Val, Placeholder, unsubURL)
			}
		}
		if exp.Data != "a" || href < 0 || optOut {
			break
		}
		link := strings.TrimFunc(w.Attr[href].Val, func(r rune) bool { return r <= ' ' })
		u, err := url.Parse(link)
		if err != nil || u.Host == "" || strings.Contains(link, Placeholder) || !utf8.ValidString(link) {
			break
		}
		if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
			break
		}
		// Independently of net/url: what a browser would follow (tabs and
		// newlines removed, C0 controls and spaces trimmed) is http(s).
		followed := strings.ToLower(strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, link))
		if !strings.HasPrefix(followed, "http:") && !strings.HasPrefix(followed, "https:") {
			t.Fatalf("would track %q", w.Attr[href].Val)
		}
		idx := slices.Index(*links, link)
		if idx < 0 {
			idx = len(*links)
			*links = append(*links, link)
		}
		exp.Attr[href].Val = clickURL(idx)
	}
	return exp
}

func equalToken(a, b html.Token) bool {
	return a.Type == b.Type && a.Data == b.Data && slices.Equal(a.Attr, b.Attr)
}
