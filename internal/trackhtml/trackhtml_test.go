package trackhtml

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func clickURL(i int) string { return fmt.Sprintf("https://t.example/c/%d", i) }

const (
	pixelURL = "https://t.example/o/r1?a=1&b=2"
	pixelTag = `<img src="https://t.example/o/r1?a=1&amp;b=2" width="1" height="1" alt="">`
	unsubURL = "https://t.example/u/r1?x=1&y=\"2\""
	unsubEsc = `https://t.example/u/r1?x=1&amp;y=&#34;2&#34;`
)

func TestRewrite(t *testing.T) {
	tests := []struct {
		name, in, want string
		links          []string
	}{
		{
			name:  "http and https links, other attributes kept",
			in:    `<p><a class="b" href="https://x.example/a" target=_blank>A</a> <a href='http://y.example/'>B</a></p>`,
			want:  `<p><a class="b" href="https://t.example/c/0" target="_blank">A</a> <a href="https://t.example/c/1">B</a></p>`,
			links: []string{"https://x.example/a", "http://y.example/"},
		},
		{
			name:  "upper case tag, attribute and scheme; unquoted value",
			in:    `<A HREF=HTTPS://X.example/Q?a=1>x</A>`,
			want:  `<a href="https://t.example/c/0">x</A>`,
			links: []string{"HTTPS://X.example/Q?a=1"},
		},
		{
			name:  "entities decoded in the stored link, spaces trimmed",
			in:    "<a href=\" https://x.example/?a=1&amp;b=2&#x26;c=3\n\">x</a>",
			want:  `<a href="https://t.example/c/0">x</a>`,
			links: []string{"https://x.example/?a=1&b=2&c=3"},
		},
		{
			name:  "the same URL twice is one link",
			in:    `<a href="https://x.example/">1</a><a href="https://y.example/">2</a><a href="https://x.example/">3</a><a href="https://x.example">4</a>`,
			want:  `<a href="https://t.example/c/0">1</a><a href="https://t.example/c/1">2</a><a href="https://t.example/c/0">3</a><a href="https://t.example/c/2">4</a>`,
			links: []string{"https://x.example/", "https://y.example/", "https://x.example"},
		},
		{
			name: "opted out, any case",
			in:   `<a href="https://x.example/" data-mailyard-track="FALSE">x</a><a data-mailyard-track=false href="https://x.example/">y</a>`,
			want: `<a href="https://x.example/" data-mailyard-track="FALSE">x</a><a data-mailyard-track=false href="https://x.example/">y</a>`,
		},
		{
			name:  "data-mailyard-track other than false still tracks",
			in:    `<a href="https://x.example/" data-mailyard-track="true">x</a>`,
			want:  `<a href="https://t.example/c/0" data-mailyard-track="true">x</a>`,
			links: []string{"https://x.example/"},
		},
		{
			name: "not UTF-8 (a Latin-1 part's é): left alone",
			in:   "<a href=\"https://x.example/caf\xe9\">x</a>",
			want: "<a href=\"https://x.example/caf\xe9\">x</a>",
		},
		{
			name: "not http(s): left alone",
			in: `<a href="mailto:a@x.example">m</a><a href="tel:+1555">t</a><a href="#top">f</a><a href="/rel">r</a>` +
				`<a href="javascript:alert(1)">j</a><a href=" JaVaScRiPt:alert(1)">j</a><a href="jav&#x09;ascript:alert(1)">j</a>` +
				`<a href="data:text/html,x">d</a><a href="//x.example/">p</a><a href="http:x.example">h</a><a href="https://">e</a>` +
				`<a href="ht&#x09;tps://x.example/">c</a><a href="https://x.example/%zz">b</a><a>no href</a><a name="x">named</a>`,
			want: `<a href="mailto:a@x.example">m</a><a href="tel:+1555">t</a><a href="#top">f</a><a href="/rel">r</a>` +
				`<a href="javascript:alert(1)">j</a><a href=" JaVaScRiPt:alert(1)">j</a><a href="jav&#x09;ascript:alert(1)">j</a>` +
				`<a href="data:text/html,x">d</a><a href="//x.example/">p</a><a href="http:x.example">h</a><a href="https://">e</a>` +
				`<a href="ht&#x09;tps://x.example/">c</a><a href="https://x.example/%zz">b</a><a>no href</a><a name="x">named</a>`,
		},
		{
			name:  "only <a> tags, and only the first of two hrefs",
			in:    `<area href="https://x.example/"><link href="https://x.example/"><a href="https://x.example/1" href="https://x.example/2">x</a>`,
			want:  `<area href="https://x.example/"><link href="https://x.example/"><a href="https://t.example/c/0">x</a>`,
			links: []string{"https://x.example/1"},
		},
		{
			name:  "self-closing tag stays self-closing",
			in:    `<a href="https://x.example/"/>`,
			want:  `<a href="https://t.example/c/0"/>`,
			links: []string{"https://x.example/"},
		},
		{
			name: "links in comments and raw text are not tags",
			in:   `<!-- <a href="https://x.example/"> --><script>"<a href='https://x.example/'>"</script><textarea><a href="https://x.example/"></textarea>`,
			want: `<!-- <a href="https://x.example/"> --><script>"<a href='https://x.example/'>"</script><textarea><a href="https://x.example/"></textarea>`,
		},
		{
			name:  "entities in text are kept as written",
			in:    `<p>a &amp; b &lt; c &nbsp;&copy</p><a href="https://x.example/">&quot;x&quot;</a>`,
			want:  `<p>a &amp; b &lt; c &nbsp;&copy</p><a href="https://t.example/c/0">&quot;x&quot;</a>`,
			links: []string{"https://x.example/"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Rewrite([]byte(tt.in), Params{ClickURL: clickURL})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.HTML) != tt.want {
				t.Errorf("HTML:\n got %s\nwant %s", res.HTML, tt.want)
			}
			if !slices.Equal(res.Links, tt.links) {
				t.Errorf("Links: got %q, want %q", res.Links, tt.links)
			}
		})
	}
}

func TestUnsubscribe(t *testing.T) {
	tests := []struct {
		name, in, want string
		links          []string
	}{
		{
			name: "in text and in an href, which is not tracked",
			in:   `<p>Leave: {{unsubscribe_url}}</p><a href="{{unsubscribe_url}}">unsubscribe</a>`,
			want: `<p>Leave: ` + unsubEsc + `</p><a href="` + unsubEsc + `">unsubscribe</a>`,
		},
		{
			name:  "inside a longer http URL: replaced, not tracked",
			in:    `<a href="https://x.example/prefs?u={{unsubscribe_url}}">prefs</a><a href="https://x.example/">x</a>`,
			want:  `<a href="https://x.example/prefs?u=` + unsubEsc + `">prefs</a><a href="https://t.example/c/0">x</a>`,
			links: []string{"https://x.example/"},
		},
		{
			name: "after < or a reference: its first character as a reference, so no tag or longer reference forms",
			in:   `a <{{unsubscribe_url}} b/{{unsubscribe_url}} &amp{{unsubscribe_url}} &#{{unsubscribe_url}} x:{{unsubscribe_url}}`,
			want: `a <&#104;ttps://t.example/u/r1?x=1&amp;y=&#34;2&#34; b/&#104;ttps://t.example/u/r1?x=1&amp;y=&#34;2&#34; &amp&#104;ttps://t.example/u/r1?x=1&amp;y=&#34;2&#34; &#&#104;ttps://t.example/u/r1?x=1&amp;y=&#34;2&#34; x:` + unsubEsc,
		},
		{
			name: "in other attributes of other tags",
			in:   `<img alt="{{unsubscribe_url}}" src=x.png><td title='{{unsubscribe_url}}'>`,
			want: `<img alt="` + unsubEsc + `" src="x.png"><td title="` + unsubEsc + `">`,
		},
		{
			name: "left alone in raw text, comments, and when written with references",
			in:   `<title>{{unsubscribe_url}}</title><script>var u="{{unsubscribe_url}}"</script><style>/*{{unsubscribe_url}}*/</style><!--{{unsubscribe_url}}-->&#123;{unsubscribe_url}}`,
			want: `<title>{{unsubscribe_url}}</title><script>var u="{{unsubscribe_url}}"</script><style>/*{{unsubscribe_url}}*/</style><!--{{unsubscribe_url}}-->&#123;{unsubscribe_url}}`,
		},
		{
			name: "left alone in raw text opened by a self-closing tag, which the tokenizer reads as a start tag",
			in:   `<title/>{{unsubscribe_url}}</title><SCRIPT/>u="{{unsubscribe_url}}"</script><textarea x="1"/>{{unsubscribe_url}}</textarea><style/>{{unsubscribe_url}}`,
			want: `<title/>{{unsubscribe_url}}</title><SCRIPT/>u="{{unsubscribe_url}}"</script><textarea x="1"/>{{unsubscribe_url}}</textarea><style/>{{unsubscribe_url}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Rewrite([]byte(tt.in), Params{ClickURL: clickURL, UnsubscribeURL: unsubURL})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.HTML) != tt.want {
				t.Errorf("HTML:\n got %s\nwant %s", res.HTML, tt.want)
			}
			if !slices.Equal(res.Links, tt.links) {
				t.Errorf("Links: got %q, want %q", res.Links, tt.links)
			}
		})
	}
	// Without an unsubscribe URL the placeholder stays, and the href is
	// still not tracked: the links are the same whatever Params say.
	in := `<a href="{{unsubscribe_url}}">u</a> {{unsubscribe_url}} <a href="https://x.example/?u={{unsubscribe_url}}">p</a>`
	res, err := Rewrite([]byte(in), Params{ClickURL: clickURL})
	if err != nil || string(res.HTML) != in || len(res.Links) != 0 {
		t.Errorf("without a URL: got %s, %q, %v", res.HTML, res.Links, err)
	}
}

func TestPixel(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"before </body>", `<html><body><p>x</p></body></html>`, `<html><body><p>x</p>` + pixelTag + `</body></html>`},
		{"before the last of two </body>", `<body>a</body>b</BODY >c`, `<body>a</body>b` + pixelTag + `</BODY >c`},
		{"no </body>: at the end", `<p>x</p>`, `<p>x</p>` + pixelTag},
		{"empty input", ``, pixelTag},
		{"</body> in a comment or script does not count", `<p>x<!--</body>--><script></body></script>`, `<p>x<!--</body>--><script></body></script>` + pixelTag},
		{"unclosed comment: before it", `<p>x</p><!-- never closed`, `<p>x</p>` + pixelTag + `<!-- never closed`},
		{"unclosed script: before it", `<p>x</p><script>var a`, `<p>x</p>` + pixelTag + `<script>var a`},
		{"unfinished tag: before it", `<p>x</p><a href="https://x.ex`, `<p>x</p>` + pixelTag + `<a href="https://x.ex`},
		{"empty <plaintext> at the end: before it", `<p>x</p><plaintext>`, `<p>x</p>` + pixelTag + `<plaintext>`},
		{"unclosed self-closing script: before it", `<p>x</p><script/>var a`, `<p>x</p>` + pixelTag + `<script/>var a`},
		{"trailing text and a lone <", `<p>x</p> a < b`, `<p>x</p> a < b` + pixelTag},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Rewrite([]byte(tt.in), Params{PixelURL: pixelURL})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.HTML) != tt.want {
				t.Errorf("HTML:\n got %s\nwant %s", res.HTML, tt.want)
			}
		})
	}
}

// TestNothingToDo: with no Params the output is the input, and Links are
// still found (they depend on the source only).
func TestNothingToDo(t *testing.T) {
	in := `<!DOCTYPE html><html><body><a href="https://x.example/">x</a> {{unsubscribe_url}}</body></html>`
	res, err := Rewrite([]byte(in), Params{})
	if err != nil || string(res.HTML) != in || !slices.Equal(res.Links, []string{"https://x.example/"}) {
		t.Errorf("got %s, %q, %v", res.HTML, res.Links, err)
	}
}

// In a part that is not UTF-8, a link with non-ASCII bytes is left as
// written even when they happen to be valid UTF-8 (GB2312's C4 A1 reads as
// U+0121): tracked, it would redirect to another URL. ASCII links are
// tracked as in any part.
func TestNotUTF8(t *testing.T) {
	in := "<a href=\"https://x.example/\xc4\xa1\">a</a><a href=\"https://y.example/\">b</a>"
	res, err := Rewrite([]byte(in), Params{ClickURL: clickURL, NotUTF8: true})
	want := "<a href=\"https://x.example/\xc4\xa1\">a</a><a href=\"https://t.example/c/0\">b</a>"
	if err != nil || string(res.HTML) != want || !slices.Equal(res.Links, []string{"https://y.example/"}) {
		t.Errorf("got %q, %q, %v; want %q", res.HTML, res.Links, err, want)
	}
	// The same bytes in a UTF-8 part are a link like any other.
	if res, err := Rewrite([]byte(in), Params{ClickURL: clickURL}); err != nil || len(res.Links) != 2 {
		t.Errorf("UTF-8 part: %q, %v", res.Links, err)
	}
}

// In a part that is not UTF-8, the other attributes of a rewritten tag keep
// their characters: a character reference the tokenizer decoded is written
// back as a reference, not as UTF-8 bytes (which would read as "cafÃ©"
// there), and the charset's own bytes (Latin-1's E9) stay as they were.
func TestNotUTF8AttributesKeepTheirCharacters(t *testing.T) {
	in := "<a href=\"https://x.example/\" title=\"caf&eacute; &#8217;\" alt=\"d\xe9j\xe0\">a</a>"
	res, err := Rewrite([]byte(in), Params{ClickURL: clickURL, NotUTF8: true})
	want := "<a href=\"https://t.example/c/0\" title=\"caf&#233; &#8217;\" alt=\"d\xe9j\xe0\">a</a>"
	if err != nil || string(res.HTML) != want {
		t.Errorf("got %q, %v; want %q", res.HTML, err, want)
	}
	// The charset's bytes that happen to be valid UTF-8 (GB2312's
	// "时间", CA B1 BC E4; KOI8-R's "ещё", C5 DD A3) stay as they were too.
	in = "<a href=\"https://x.example/\" title=\"\xca\xb1\xbc\xe4\" style=\"font-family:\xce\xa2\xc8\xed\" alt=\"\xc5\xdd\xa3\">\xca\xb1</a>"
	res, err = Rewrite([]byte(in), Params{ClickURL: clickURL, NotUTF8: true, PixelURL: "https://t.example/o.gif"})
	want = "<a href=\"https://t.example/c/0\" title=\"\xca\xb1\xbc\xe4\" style=\"font-family:\xce\xa2\xc8\xed\" alt=\"\xc5\xdd\xa3\">\xca\xb1</a>" +
		"<img src=\"https://t.example/o.gif\" width=\"1\" height=\"1\" alt=\"\">"
	if err != nil || string(res.HTML) != want {
		t.Errorf("got %q, %v; want %q", res.HTML, err, want)
	}
}

func TestMaxLinks(t *testing.T) {
	var b strings.Builder
	for i := range MaxLinks + 5 {
		fmt.Fprintf(&b, `<a href="https://x.example/%d">x</a>`, i)
	}
	b.WriteString(`<a href="https://x.example/0">again</a>`)
	res, err := Rewrite([]byte(b.String()), Params{ClickURL: clickURL})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Links) != MaxLinks {
		t.Fatalf("%d links, want %d", len(res.Links), MaxLinks)
	}
	out := string(res.HTML)
	if !strings.Contains(out, fmt.Sprintf(`<a href="https://x.example/%d">x</a>`, MaxLinks)) {
		t.Error("a link past the cap was rewritten")
	}
	if !strings.HasSuffix(out, `<a href="https://t.example/c/0">again</a>`) {
		t.Error("a known link past the cap was not rewritten")
	}
}

// TestLinksBefore: the cap is for the whole email, so a body after others
// with links tracks only what is left of it.
func TestLinksBefore(t *testing.T) {
	in := `<a href="https://x.example/0">0</a><a href="https://x.example/1">1</a><a href="https://x.example/2">2</a><a href="https://x.example/0">again</a>`
	tests := []struct {
		before int
		want   string
		links  []string
	}{
		{MaxLinks - 2, `<a href="https://t.example/c/0">0</a><a href="https://t.example/c/1">1</a><a href="https://x.example/2">2</a><a href="https://t.example/c/0">again</a>`,
			[]string{"https://x.example/0", "https://x.example/1"}},
		{MaxLinks, in, nil},
		{MaxLinks + 1, in, nil},
	}
	for _, tt := range tests {
		res, err := Rewrite([]byte(in), Params{ClickURL: clickURL, LinksBefore: tt.before})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.HTML) != tt.want || !slices.Equal(res.Links, tt.links) {
			t.Errorf("%d links before: got %s, %q", tt.before, res.HTML, res.Links)
		}
	}
}

// bigHTML is about 10 MiB of HTML with 100,000 links, half of them distinct.
func bigHTML() []byte {
	var b strings.Builder
	b.WriteString("<html><body>")
	for i := 0; b.Len() < 10<<20; i++ {
		fmt.Fprintf(&b, `<p style="margin:0">Para %d with {{unsubscribe_url}} &amp; text</p><a href="https://x.example/p/%d?a=1&amp;b=2">link</a>`, i, i%50000)
		b.WriteString(strings.Repeat("filler ", 2))
	}
	b.WriteString("</body></html>")
	return []byte(b.String())
}

func TestBigInput(t *testing.T) {
	if testing.Short() {
		t.Skip("10 MiB input")
	}
	in := bigHTML()
	p := Params{ClickURL: clickURL, PixelURL: pixelURL, UnsubscribeURL: unsubURL}
	// Its speed is BenchmarkRewrite's to measure; here, the caps and the
	// allocations, which do not depend on the machine.
	res, err := Rewrite(in, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Links) != MaxLinks {
		t.Errorf("%d links", len(res.Links))
	}
	allocs := testing.AllocsPerRun(1, func() { _, _ = Rewrite(in, p) })
	// A few allocations per tag at most, not per byte.
	if n := strings.Count(string(in), "<"); allocs > float64(4*n) {
		t.Errorf("%v allocations for %d tags", allocs, n)
	}
}

func BenchmarkRewrite(b *testing.B) {
	in := bigHTML()
	p := Params{ClickURL: clickURL, PixelURL: pixelURL, UnsubscribeURL: unsubURL}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Rewrite(in, p); err != nil {
			b.Fatal(err)
		}
	}
}
