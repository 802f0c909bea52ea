// Package trackhtml rewrites one recipient's copy of an HTML body for open,
// click and unsubscribe tracking: the href of every <a> whose URL is http or
// https becomes a click-tracking URL, an open pixel is added at the end of the
// body, and the placeholder {{unsubscribe_url}} becomes the recipient's
// unsubscribe URL. It does no I/O.
//
// The HTML is the customer's, so the rewrite is deliberately narrow: the input
// is tokenized with golang.org/x/net/html (the tokenizer of the HTML standard,
// which is what browsers and most mail clients use; regular expressions get
// HTML wrong) and every token is copied byte for byte, except the <a> start
// tags it changes, the placeholders it replaces and the pixel it adds.
// Tokenizing the output gives the input's token stream with only those
// changes, which the fuzz test checks.
//
// What is left alone, and why:
//   - links that are not absolute http(s) URLs (mailto:, tel:, fragments,
//     relative URLs, javascript:, data:, anything net/url cannot parse): a
//     redirect through the tracker would break or change them, and sending a
//     javascript: URL through a redirect would be a way to run script;
//   - links marked data-mailyard-track="false", the customer's opt-out;
//   - hrefs containing {{unsubscribe_url}}: they differ per recipient, and the
//     list of links must be the same for every recipient (see Result.Links);
//   - <a> tags inside comments, including Outlook's conditional comments
//     (<!--[if mso]>...<![endif]-->): for the tokenizer they are comment text;
//   - the contents of raw-text elements (<script>, <style>, <title>,
//     <textarea>, ...), placeholders included: a URL would need escaping for
//     JavaScript or CSS there, and no mail client shows them as text anyway;
//   - a placeholder in text written with character references (&#123;...):
//     text is copied raw, so only the literal placeholder is replaced, which
//     also gives customers a way to show the placeholder itself.
package trackhtml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// MaxLinks is the most distinct URLs one email gets click-tracked, over all
// its HTML bodies (see Params.LinksBefore). The caller stores each link as a
// row once per email, so without a cap a single message could make the store
// write hundreds of thousands of rows, and a link's index must fit in its
// token; URLs past the cap are left as they are (they still work, they are
// just not counted).
const MaxLinks = 10000

// Placeholder is replaced by Params.UnsubscribeURL.
const Placeholder = "{{unsubscribe_url}}"

var placeholder = []byte(Placeholder)

// trackAttr on an <a> with the value "false" (any case) keeps its link as is.
const trackAttr = "data-mailyard-track"

// Params says what to do to one recipient's HTML.
type Params struct {
	// ClickURL returns the tracking URL of link number i (an index into
	// Result.Links); nil: no click tracking.
	ClickURL func(i int) string
	// PixelURL is the open pixel's src; empty: no pixel.
	PixelURL string
	// UnsubscribeURL replaces {{unsubscribe_url}}; empty: the placeholder is
	// left as it is.
	UnsubscribeURL string
	// LinksBefore is how many links the email's earlier HTML bodies have (the
	// length of their Result.Links): MaxLinks is for the whole email, so this
	// body tracks at most MaxLinks-LinksBefore distinct URLs.
	LinksBefore int
	// NotUTF8 says the HTML is in another charset (US-ASCII, ISO-8859-1,
	// GB2312...): a link with non-ASCII bytes is then left as written, since
	// its bytes read as UTF-8, even validly, would be another URL, and a
	// rewritten tag writes non-ASCII characters as character references.
	NotUTF8 bool
}

// Result is one recipient's rewritten HTML.
type Result struct {
	HTML []byte
	// Links are the distinct trackable URLs as the customer wrote them
	// (character references decoded, surrounding spaces trimmed), in order of
	// first appearance; link i is the one Params.ClickURL(i) is asked for.
	// They depend only on the source HTML and Params.LinksBefore, never on
	// the recipient's URLs, so the caller can store them once per email and
	// use the indexes for every recipient.
	Links []string
}

// Rewrite rewrites src as p says. It accepts any input, however malformed;
// the error is only for an input the tokenizer cannot read at all.
func Rewrite(src []byte, p Params) (Result, error) {
	r := rewriter{
		p:     p,
		out:   bytes.NewBuffer(make([]byte, 0, len(src)+len(src)/8+256)),
		index: map[string]int{},
		body:  -1,
	}
	if p.UnsubscribeURL != "" {
		r.unsubText = []byte(html.EscapeString(p.UnsubscribeURL))
		r.unsubTextGuarded = r.unsubText
		if c := r.unsubText[0]; c < utf8.RuneSelf && c != '&' {
			r.unsubTextGuarded = append(fmt.Appendf(nil, "&#%d;", c), r.unsubText[1:]...)
		}
	}
	if p.NotUTF8 {
		src = legacyToPrivateUse(src)
	}
	if err := r.run(src); err != nil {
		return Result{}, err
	}
	out := r.out.Bytes()
	if p.PixelURL != "" {
		out = r.addPixel(out)
	}
	if p.NotUTF8 {
		out = privateUseToLegacy(out)
	}
	return Result{HTML: out, Links: r.links}, nil
}

type rewriter struct {
	p     Params
	out   *bytes.Buffer
	links []string
	index map[string]int // links[index[u]] == u
	// body is the offset in out of the last </body>, -1 if none.
	body int
	// unsubText is the unsubscribe URL escaped for text, nil if none.
	unsubText []byte
	// unsubTextGuarded is unsubText with its first character written as a
	// character reference, for after bytes it could join (see joins).
	unsubTextGuarded []byte
	// attrs is reused for the attributes of each tag looked at.
	attrs []html.Attribute
	// safe is the offset in out of the last token boundary at which the
	// tokenizer is in its data state, where a tag can be inserted without
	// changing how anything around it is read.
	safe int
}

func (r *rewriter) run(src []byte) error {
	z := html.NewTokenizer(bytes.NewReader(src))
	// inRaw: the tokenizer is inside a raw-text element, from its start tag
	// to its end tag (or to the end of the input).
	inRaw := false
	for {
		tt := z.Next()
		raw := z.Raw()
		if !inRaw && (tt != html.ErrorToken || len(raw) > 0) {
			r.safe = r.out.Len()
		}
		switch tt {
		case html.ErrorToken:
			if !errors.Is(z.Err(), io.EOF) {
				return z.Err()
			}
			// An unfinished tag at the end gives no token; keep its bytes.
			r.out.Write(raw)
			return nil
		case html.TextToken:
			if !inRaw && r.unsubText != nil {
				r.writeReplaced(raw)
			} else {
				r.out.Write(raw)
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			// The tokenizer switches to raw text after <script/> as after
			// <script> (a / on an element that is not void is ignored), so
			// both open one here.
			if isRawText(string(name)) {
				inRaw = true
			}
			r.tag(z, raw, string(name), hasAttr, tt == html.SelfClosingTagToken)
		case html.EndTagToken:
			name, _ := z.TagName()
			if string(name) == "body" {
				r.body = r.out.Len()
			}
			inRaw = false
			r.out.Write(raw)
		default:
			r.out.Write(raw)
		}
	}
}

// joins says whether a URL written right after c could be read together with
// what comes before: "<" or "</" and a letter start a tag, "&", "&#" or
// "&name" and a letter or digit can make a character reference.
func joins(c byte) bool {
	return c == '<' || c == '/' || c == '&' || c == '#' ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// writeReplaced writes a text token's raw bytes with each placeholder
// replaced by the escaped unsubscribe URL.
func (r *rewriter) writeReplaced(raw []byte) {
	for {
		before, after, found := bytes.Cut(raw, placeholder)
		r.out.Write(before)
		if !found {
			return
		}
		if len(before) > 0 && joins(before[len(before)-1]) {
			r.out.Write(r.unsubTextGuarded)
		} else {
			r.out.Write(r.unsubText)
		}
		raw = after
	}
}

// tag copies a start tag, rewriting it if it is an <a> with a trackable href
// or has the placeholder in an attribute.
func (r *rewriter) tag(z *html.Tokenizer, raw []byte, name string, hasAttr, selfClosing bool) {
	literalPlaceholder := r.unsubText != nil && bytes.Contains(raw, placeholder)
	if !hasAttr || (name != "a" && !literalPlaceholder) {
		r.out.Write(raw)
		return
	}
	// Raw points into the tokenizer's buffer, valid until the next call to
	// Next; copy it before reading the attributes, in case it is kept.
	start := r.out.Len()
	r.out.Write(raw)
	tok := html.Token{Data: name, Attr: r.attrs[:0]}
	for more := true; more; {
		var k, v []byte
		k, v, more = z.TagAttr()
		tok.Attr = append(tok.Attr, html.Attribute{Key: string(k), Val: string(v)})
	}
	r.attrs = tok.Attr
	changed := false
	if name == "a" {
		changed = r.trackLink(&tok)
	}
	if literalPlaceholder {
		for i, a := range tok.Attr {
			if strings.Contains(a.Val, Placeholder) {
				tok.Attr[i].Val = strings.ReplaceAll(a.Val, Placeholder, r.p.UnsubscribeURL)
				changed = true
			}
		}
	}
	if changed {
		r.out.Truncate(start)
		writeTag(r.out, tok, selfClosing, r.p.NotUTF8)
	}
}

// trackLink replaces the href of the <a> tok with its click URL if it is to
// be tracked, and says whether it did.
func (r *rewriter) trackLink(tok *html.Token) bool {
	href := -1
	for i, a := range tok.Attr {
		switch a.Key {
		case "href":
			href = i // the tokenizer keeps only the first of a repeated attribute
		case trackAttr:
			if strings.EqualFold(strings.TrimSpace(a.Val), "false") {
				return false
			}
		}
	}
	if href < 0 {
		return false
	}
	link, ok := trackable(tok.Attr[href].Val, r.p.NotUTF8)
	if !ok {
		return false
	}
	i, seen := r.index[link]
	if !seen {
		if len(r.links) >= MaxLinks-r.p.LinksBefore {
			return false
		}
		i = len(r.links)
		r.index[link] = i
		r.links = append(r.links, link)
	}
	if r.p.ClickURL == nil {
		return false
	}
	tok.Attr[href].Val = r.p.ClickURL(i)
	return true
}

// trackable returns the link to store for a decoded href and whether it is
// to be tracked: an absolute http or https URL with a host, which net/url
// parses (it refuses control characters, so "jav\tascript:" is never one).
// Browsers trim C0 controls and spaces around a URL; so does this. A link
// that is not valid UTF-8 (a Latin-1 part's "café"), or that has non-ASCII
// characters in a part that is not UTF-8 (asciiOnly), is left as written:
// stored and redirected to as UTF-8, its clicks would go to another URL.
func trackable(href string, asciiOnly bool) (string, bool) {
	link := strings.TrimFunc(href, func(r rune) bool { return r <= ' ' })
	if strings.Contains(link, Placeholder) || !utf8.ValidString(link) {
		return "", false
	}
	if asciiOnly && strings.ContainsFunc(link, func(r rune) bool { return r >= utf8.RuneSelf }) {
		return "", false
	}
	u, err := url.Parse(link)
	if err != nil || u.Host == "" {
		return "", false
	}
	if !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https") {
		return "", false
	}
	return link, true
}

// writeTag writes a start tag with all its attributes double-quoted and
// escaped. Names are written as the tokenizer returns them (lower case), so
// the tag tokenizes to tok again. The tokenizer decodes character
// references to UTF-8 (&eacute; to é); in HTML of another charset (notUTF8)
// such characters are written back as references, as UTF-8 bytes would
// read as others there, while the charset's own bytes (which stand in the
// Private Use Area while the part is rewritten) stay as they were.
func writeTag(w *bytes.Buffer, tok html.Token, selfClosing, notUTF8 bool) {
	w.WriteByte('<')
	w.WriteString(tok.Data)
	for _, a := range tok.Attr {
		w.WriteByte(' ')
		w.WriteString(a.Key)
		w.WriteString(`="`)
		val := html.EscapeString(a.Val)
		if notUTF8 {
			val = nonASCIIAsReferences(val)
		}
		w.WriteString(val)
		w.WriteByte('"')
	}
	if selfClosing {
		w.WriteString("/>")
	} else {
		w.WriteByte('>')
	}
}

// isRawText says whether the tokenizer reads the contents of the element as
// text up to its end tag (x/net/html's list).
func isRawText(name string) bool {
	switch name {
	case "iframe", "noembed", "noframes", "noscript", "plaintext", "script", "style", "textarea", "title", "xmp":
		return true
	}
	return false
}

// A part in another charset (Params.NotUTF8) is rewritten with each of its
// bytes 0x80-0xFF standing for itself as a character of the Private Use
// Area, U+F780-U+F7FF, and turned back after. Its own bytes then never
// look like anything else: taken as they are, the charset's bytes that
// happen to be valid UTF-8 (GB2312's CA B1, "时") could not be told from
// a character reference the tokenizer decoded (&eacute;), which must be
// written back as a reference.
const legacyBase = 0xF700

func isLegacyByte(r rune) bool { return r >= legacyBase+0x80 && r <= legacyBase+0xFF }

// legacyToPrivateUse maps each byte 0x80-0xFF of src to its character.
func legacyToPrivateUse(src []byte) []byte {
	out := make([]byte, 0, len(src)+len(src)/4)
	for _, c := range src {
		if c < utf8.RuneSelf {
			out = append(out, c)
		} else {
			out = utf8.AppendRune(out, legacyBase+rune(c))
		}
	}
	return out
}

// privateUseToLegacy turns the characters of legacyToPrivateUse back into
// their bytes.
func privateUseToLegacy(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if isLegacyByte(r) {
			out = append(out, byte(r-legacyBase))
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

// nonASCIIAsReferences writes each non-ASCII character of s as a numeric
// character reference, but the characters that stand for a part's own
// bytes (legacyToPrivateUse), which are turned back into them after. s is
// valid UTF-8: the part was mapped before it was read.
func nonASCIIAsReferences(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= utf8.RuneSelf && !isLegacyByte(r) {
			b.WriteString("&#" + strconv.Itoa(int(r)) + ";")
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// addPixel inserts the open pixel before the last </body>, or else at the
// end. If the input ends inside something unfinished (a comment, a <script>,
// a tag cut short), a pixel at the end would become part of it, so it goes at
// the last point where a tag is read as a tag.
func (r *rewriter) addPixel(out []byte) []byte {
	var b bytes.Buffer
	writeTag(&b, html.Token{Data: "img", Attr: []html.Attribute{
		{Key: "src", Val: r.p.PixelURL}, {Key: "width", Val: "1"}, {Key: "height", Val: "1"}, {Key: "alt"},
	}}, false, false)
	pixel := b.Bytes()
	at := r.body
	if at < 0 {
		at = len(out)
		if !endsWith(out[r.safe:], pixel) {
			at = r.safe
		}
	}
	res := make([]byte, 0, len(out)+len(pixel))
	res = append(res, out[:at]...)
	res = append(res, pixel...)
	return append(res, out[at:]...)
}

// endsWith says whether tail followed by tag tokenizes with tag as its own
// last token (a tag, not the same bytes read as text), tail starting in the tokenizer's data state.
func endsWith(tail, tag []byte) bool {
	z := html.NewTokenizer(io.MultiReader(bytes.NewReader(tail), bytes.NewReader(tag)))
	var last []byte
	lastType := html.ErrorToken
	for tt := z.Next(); tt != html.ErrorToken; tt = z.Next() {
		last, lastType = append(last[:0], z.Raw()...), tt
	}
	return lastType == html.StartTagToken && bytes.Equal(last, tag)
}
