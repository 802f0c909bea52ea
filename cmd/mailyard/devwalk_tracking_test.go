package main

import (
	"bytes"
	"fmt"
	"image/gif"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/http"
	"net/mail"
	"net/smtp"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/mailyard/mailyard/internal/testenv"
)

// trackedHTML has one link of each kind the tracking rules name: two
// tracked http(s) links (the first with &amp; in its query), and a mailto:,
// a fragment, an opted-out link, a javascript: link and the unsubscribe
// placeholder, all left alone (the placeholder replaced).
const trackedHTML = `<!doctype html><html><body>
<p>Hi Ada, our <a href="https://shop.example/sale?utm=mail&amp;id=42">sale</a> is on.</p>
<p><a href="http://shop.example/account">Your account</a></p>
<p><a href="mailto:help@shop.test">Write to us</a> · <a href="#top">Top</a> ·
<a href="https://shop.example/private" data-mailyard-track="false">Private</a> ·
<a href="javascript:alert(1)">Script</a></p>
<p><a href="{{unsubscribe_url}}">Unsubscribe</a></p>
</body></html>
`

// The README's tracked email in `make run`, on the real `mailyard dev`: turn
// opens, clicks and unsubscribe on for a domain, send an HTML email, read
// what was sent in .data/mail/<email_id>.eml (signature, rewritten links,
// pixel, List-Unsubscribe), then act as the recipient's mail client and
// browser: open, click, forge, unsubscribe (the confirm page, the one-click
// POST and the mailto: form), checking the webhooks, the email's events,
// the suppression list and the statistics.
func TestDevWalkTracking(t *testing.T) {
	dev := startDev(t)
	api, key, hooks := dev.api, dev.adminKey, dev.hooks
	api.do(key, "POST", "/api/v1/webhooks", map[string]any{"url": hooks.url,
		"event_types": []string{"delivered", "bounced", "opened", "clicked", "unsubscribed"}}, 201)
	domainID := api.do(key, "POST", "/api/v1/domains", map[string]any{"domain": "shop.test"}, 201)["domain"].(map[string]any)["id"]
	domainPath := fmt.Sprintf("/api/v1/domains/%v", domainID)
	testenv.Eventually(t, 30*time.Second, "shop.test verified", func() bool {
		return api.do(key, "GET", domainPath, nil, 200)["domain"].(map[string]any)["status"] == "verified"
	})
	tr := api.do(key, "PATCH", domainPath+"/tracking", map[string]any{"opens": true, "clicks": true, "unsubscribe": true}, 200)["domain"].(map[string]any)["tracking"].(map[string]any)
	if tr["opens"] != true || tr["clicks"] != true || tr["unsubscribe"] != true || tr["custom_domain"] != nil {
		t.Fatalf("tracking after PATCH: %v", tr)
	}
	sendKey := api.do(key, "POST", "/api/v1/credentials", map[string]any{"sending_domain_id": domainID, "label": "app", "permissions": []string{"send"}}, 201)["secret_key"].(string)
	send := func(body map[string]any) string {
		t.Helper()
		return api.do(sendKey, "POST", "/api/v1/emails", body, 202)["email"].(map[string]any)["id"].(string)
	}
	id := send(map[string]any{
		"from": "Shop <hello@shop.test>", "to": "ada@example.org", "subject": "Our sale",
		"text": "Hi Ada, our sale is on: https://shop.example/sale\nUnsubscribe: {{unsubscribe_url}}\n",
		"html": trackedHTML,
	})
	raw := dev.waitEML(t, id)
	waitHook(t, hooks, "delivered", id, "ada@example.org")

	// The message: signed, with List-Unsubscribe under the signature, and
	// no List-Unsubscribe-Post: `make run`'s tracking URL is http, and
	// one-click is for https only (RFC 8058).
	verifyWithPythonDKIM(t, raw, dev.dnsAddr)
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if signed := dkimSignedFields(t, msg.Header.Get("DKIM-Signature")); !signed["list-unsubscribe"] {
		t.Errorf("DKIM-Signature h= lacks list-unsubscribe: %s", msg.Header.Get("DKIM-Signature"))
	}
	base := "http://" + dev.httpAddr
	unsubURL, mailto := listUnsubscribe(t, msg.Header, base)
	if got := msg.Header.Get("List-Unsubscribe-Post"); got != "" {
		t.Errorf("List-Unsubscribe-Post over http: %q", got)
	}
	if tok := strings.TrimPrefix(unsubURL, base+"/t/u/"); !strings.HasPrefix(mailto, "unsubscribe+"+tok+"@") {
		t.Errorf("the mailto: address %q does not carry the URL's token %q", mailto, tok)
	}

	text, htmlBody := textAndHTML(t, msg)
	if strings.Contains(text, "{{unsubscribe_url}}") || !strings.Contains(text, "Unsubscribe: "+unsubURL+"\n") {
		t.Errorf("the text part does not have the unsubscribe URL in place of the placeholder:\n%s", text)
	}
	// The text's URLs are not rewritten: only the HTML's links are.
	if !strings.Contains(text, "https://shop.example/sale\n") {
		t.Errorf("the text part's link changed:\n%s", text)
	}
	hrefs, imgs := linksAndImages(t, htmlBody)
	clickRE := regexp.MustCompile("^" + regexp.QuoteMeta(base) + "/t/c/[a-z2-7]+$")
	if len(hrefs) != 7 || !clickRE.MatchString(hrefs[0]) || !clickRE.MatchString(hrefs[1]) || hrefs[0] == hrefs[1] {
		t.Fatalf("the two http(s) links are not click links: %q\n%s", hrefs, htmlBody)
	}
	for i, want := range []string{"mailto:help@shop.test", "#top", "https://shop.example/private", "javascript:alert(1)", unsubURL} {
		if hrefs[2+i] != want {
			t.Errorf("link %d: %q, want %q", 2+i, hrefs[2+i], want)
		}
	}
	if strings.Contains(htmlBody, "{{unsubscribe_url}}") {
		t.Errorf("the HTML still has the placeholder:\n%s", htmlBody)
	}
	// The pixel is the last thing in the body.
	if len(imgs) != 1 {
		t.Fatalf("images: %v\n%s", imgs, htmlBody)
	}
	pixel := imgs[0]
	if !regexp.MustCompile("^"+regexp.QuoteMeta(base)+`/t/o/[a-z2-7]+\.gif$`).MatchString(pixel["src"]) ||
		pixel["width"] != "1" || pixel["height"] != "1" || pixel["alt"] != "" || len(pixel) != 4 {
		t.Errorf("the pixel: %v", pixel)
	}
	if i, j := strings.LastIndex(htmlBody, "<img "), strings.LastIndex(htmlBody, "</a>"); i < j {
		t.Errorf("the pixel is not after the content:\n%s", htmlBody)
	}

	// The recipient's side: a client that shows redirects instead of
	// following them.
	const ua = "Mozilla/5.0 (devwalk)"
	browser := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(method, u, form string) (*http.Response, []byte) {
		t.Helper()
		var body io.Reader
		if form != "" {
			body = strings.NewReader(form)
		}
		req, err := http.NewRequest(method, u, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", ua)
		if form != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, b
	}

	// The pixel, twice, and a pixel of a made-up token: the same GIF.
	checkPixel := func(u string) {
		t.Helper()
		res, b := get("GET", u, "")
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/gif" || res.Header.Get("Cache-Control") != "no-store" || len(b) != 43 {
			t.Fatalf("GET %s: %d %v, %d bytes", u, res.StatusCode, res.Header, len(b))
		}
		img, err := gif.Decode(bytes.NewReader(b))
		if err != nil || img.Bounds().Dx() != 1 || img.Bounds().Dy() != 1 {
			t.Fatalf("GET %s: not a 1×1 GIF: %v", u, err)
		}
	}
	checkPixel(pixel["src"])
	checkPixel(pixel["src"])
	checkPixel(base + "/t/o/not-a-token.gif")
	checkPixel(base + "/t/o/" + strings.Repeat("a", 40) + ".gif")

	// The first link, twice: 302 to exactly the URL the customer wrote,
	// character references decoded.
	for range 2 {
		res, _ := get("GET", hrefs[0], "")
		if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "https://shop.example/sale?utm=mail&id=42" {
			t.Fatalf("GET %s: %d, Location %q", hrefs[0], res.StatusCode, res.Header.Get("Location"))
		}
	}
	// Forged click tokens: any one character changed is not a link.
	tok := strings.TrimPrefix(hrefs[0], base+"/t/c/")
	for _, i := range []int{0, 1, len(tok) / 2, len(tok) - 2, len(tok) - 1} {
		for _, c := range []byte{'a', '7', 'A'} {
			if tok[i] == c {
				continue
			}
			forged := tok[:i] + string(c) + tok[i+1:]
			res, b := get("GET", base+"/t/c/"+forged, "")
			if res.StatusCode != http.StatusNotFound || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || res.Header.Get("Location") != "" {
				t.Fatalf("forged token %s: %d %v\n%s", forged, res.StatusCode, res.Header, b)
			}
		}
	}
	for _, forged := range []string{"", tok[:len(tok)-1], tok + "a", strings.TrimPrefix(pixel["src"], base+"/t/o/")} {
		if res, _ := get("GET", base+"/t/c/"+forged, ""); res.StatusCode != http.StatusNotFound {
			t.Fatalf("click token %q: %d", forged, res.StatusCode)
		}
	}

	// The unsubscribe page asks and changes nothing.
	res, page := get("GET", unsubURL, "")
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") ||
		!bytes.Contains(page, []byte(`<form method="post"`)) || !bytes.Contains(page, []byte(`name="List-Unsubscribe" value="One-Click"`)) ||
		bytes.Contains(page, []byte("<script")) {
		t.Fatalf("GET %s: %d %v\n%s", unsubURL, res.StatusCode, res.Header, page)
	}
	if r := suppression(api, key, "ada@example.org"); r != "" {
		t.Fatalf("the unsubscribe page suppressed the address (%s)", r)
	}
	// The one-click POST, twice.
	for range 2 {
		if res, b := get("POST", unsubURL, "List-Unsubscribe=One-Click"); res.StatusCode != 200 {
			t.Fatalf("POST %s: %d\n%s", unsubURL, res.StatusCode, b)
		}
	}
	if r := suppression(api, key, "ada@example.org"); r != "unsubscribe" {
		t.Fatalf("ada@example.org suppressed with reason %q, want unsubscribe", r)
	}

	// One event of each: the repeated open, click and unsubscribe add none.
	opened := waitHook(t, hooks, "opened", id, "ada@example.org")
	clicked := waitHook(t, hooks, "clicked", id, "ada@example.org")
	waitHook(t, hooks, "unsubscribed", id, "ada@example.org")
	time.Sleep(2 * time.Second) // time for a duplicate to show
	if n := countHooks(hooks, id); n["opened"] != 1 || n["clicked"] != 1 || n["unsubscribed"] != 1 || n["delivered"] != 1 {
		t.Fatalf("webhooks of the email: %v", n)
	}
	if opened["subject"] != "Our sale" || opened["user_agent"] != ua {
		t.Errorf("opened: %v", opened)
	}
	if clicked["url"] != "https://shop.example/sale?utm=mail&id=42" || clicked["user_agent"] != ua {
		t.Errorf("clicked: %v", clicked)
	}
	var types []string
	for _, e := range api.do(sendKey, "GET", "/api/v1/emails/"+id+"/events", nil, 200)["events"].([]any) {
		types = append(types, e.(map[string]any)["event_type"].(string))
	}
	// Opens and clicks are written after their answer, so in either order.
	slices.Sort(types)
	if got := strings.Join(types, " "); got != "clicked delivered opened unsubscribed" {
		t.Errorf("the email's events: %s", got)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	totals := api.do(key, "GET", "/api/v1/stats?start="+today+"&end="+today, nil, 200)["totals"].(map[string]any)
	if totals["opened"] != 1.0 || totals["clicked"] != 1.0 || totals["unsubscribed"] != 1.0 {
		t.Errorf("stats of %s: %v", today, totals)
	}

	// The next email with unsubscribe on does not go to her; a receipt
	// (unsubscribe off) still does.
	news := send(map[string]any{"from": "hello@shop.test", "to": "ada@example.org", "subject": "More news", "html": "<p>News</p>"})
	if b := waitHook(t, hooks, "bounced", news, "ada@example.org"); b["bounce_type"] != "suppressed" {
		t.Errorf("bounced: %v", b)
	}
	if r := recipientStatus(api, sendKey, news, "ada@example.org"); r != "suppressed" {
		t.Errorf("the suppressed recipient's status: %q", r)
	}
	receipt := send(map[string]any{"from": "hello@shop.test", "to": "ada@example.org", "subject": "Your receipt",
		"text": "Thank you.", "tracking": map[string]any{"unsubscribe": false}})
	waitHook(t, hooks, "delivered", receipt, "ada@example.org")
	if b := dev.waitEML(t, receipt); bytes.Contains(b, []byte("List-Unsubscribe")) {
		t.Errorf("the receipt has List-Unsubscribe:\n%s", b)
	}

	// The mailto: form: mail to unsubscribe+<token>@<bounce host>, which
	// the bounce host's SMTP server receives. An email to two recipients is
	// two messages (the sink keeps <email_id>.eml and <email_id>.2.eml),
	// each with its own address; one mail to both unsubscribes both.
	pair := send(map[string]any{"from": "hello@shop.test", "to": []string{"bob@example.org", "cy@example.org"}, "subject": "Our sale", "html": trackedHTML})
	var mailtos []string
	for _, name := range []string{pair, pair + ".2"} {
		m, err := mail.ReadMessage(bytes.NewReader(dev.waitEML(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		_, mt := listUnsubscribe(t, m.Header, base)
		mailtos = append(mailtos, mt)
	}
	if mailtos[0] == mailtos[1] {
		t.Fatalf("both recipients have the unsubscribe address %s", mailtos[0])
	}
	// Mail systems may change the case of a local part.
	local, host, _ := strings.Cut(mailtos[0], "@")
	mailtos[0] = strings.ToUpper(local) + "@" + host
	req := "From: someone@example.org\r\nTo: " + strings.Join(mailtos, ", ") + "\r\nSubject: unsubscribe\r\n\r\nunsubscribe\r\n"
	if err := smtp.SendMail(dev.inboundAddr, nil, "someone@example.org", mailtos, []byte(req)); err != nil {
		t.Fatalf("mail to %v: %v", mailtos, err)
	}
	for _, addr := range []string{"bob@example.org", "cy@example.org"} {
		waitHook(t, hooks, "unsubscribed", pair, addr)
		if r := suppression(api, key, addr); r != "unsubscribe" {
			t.Errorf("%s suppressed with reason %q, want unsubscribe", addr, r)
		}
	}
}

// waitHook waits for the webhook event of type typ for the email and
// recipient, and returns its data.
func waitHook(t *testing.T, hooks *hookReceiver, typ, emailID, to string) map[string]any {
	t.Helper()
	var data map[string]any
	testenv.Eventually(t, 60*time.Second, "the "+typ+" webhook of "+to, func() bool {
		for _, h := range hooks.all() {
			d, _ := h["data"].(map[string]any)
			if h["event_type"] == typ && d["message_id"] == emailID && d["to_email"] == to {
				data = d
				return true
			}
		}
		return false
	})
	return data
}

// countHooks counts the webhook events of the email by type.
func countHooks(hooks *hookReceiver, emailID string) map[string]int {
	n := map[string]int{}
	for _, h := range hooks.all() {
		if d, _ := h["data"].(map[string]any); d["message_id"] == emailID {
			n[h["event_type"].(string)]++
		}
	}
	return n
}

// suppression is the reason the address is on the suppression list, ""
// when it is not.
func suppression(api *devClient, key, addr string) string {
	api.t.Helper()
	for _, s := range api.do(key, "GET", "/api/v1/suppressions?limit=100", nil, 200)["suppressions"].([]any) {
		if s := s.(map[string]any); s["email"] == addr {
			return s["reason"].(string)
		}
	}
	return ""
}

// recipientStatus is the status of one recipient of an email.
func recipientStatus(api *devClient, key, emailID, addr string) string {
	api.t.Helper()
	for _, r := range api.do(key, "GET", "/api/v1/emails/"+emailID, nil, 200)["email"].(map[string]any)["recipients"].([]any) {
		if r := r.(map[string]any); r["email"] == addr {
			return r["status"].(string)
		}
	}
	return ""
}

// dkimSignedFields are the (lower-cased) field names of a DKIM-Signature's
// h= tag.
func dkimSignedFields(t *testing.T, sig string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, tag := range strings.Split(sig, ";") {
		name, value, _ := strings.Cut(tag, "=")
		if strings.TrimSpace(name) != "h" {
			continue
		}
		for _, f := range strings.Split(value, ":") {
			out[strings.ToLower(strings.Join(strings.Fields(f), ""))] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("no h= in DKIM-Signature: %q", sig)
	}
	return out
}

// listUnsubscribe returns the two URIs of the List-Unsubscribe field: the
// HTTP one under base and the mailto: address.
func listUnsubscribe(t *testing.T, h mail.Header, base string) (string, string) {
	t.Helper()
	v := h.Get("List-Unsubscribe")
	m := regexp.MustCompile(`^<(` + regexp.QuoteMeta(base) + `/t/u/[a-z2-7]+)>, <mailto:(unsubscribe\+[a-z2-7]+@[a-z0-9.-]+)>$`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("List-Unsubscribe: %q", v)
	}
	return m[1], m[2]
}

// textAndHTML decodes the text/plain and text/html parts of a message
// (multipart/alternative, quoted-printable), with LF line ends.
func textAndHTML(t *testing.T, msg *mail.Message) (string, string) {
	t.Helper()
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		t.Fatalf("Content-Type %q: %v", msg.Header.Get("Content-Type"), err)
	}
	parts := map[string]string{}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = p
		if p.Header.Get("Content-Transfer-Encoding") == "quoted-printable" {
			r = quotedprintable.NewReader(p)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		parts[ct] = strings.ReplaceAll(string(b), "\r\n", "\n")
	}
	if parts["text/plain"] == "" || parts["text/html"] == "" {
		t.Fatalf("parts: %v", parts)
	}
	return parts["text/plain"], parts["text/html"]
}

// linksAndImages are the hrefs of the <a> elements of an HTML body, in
// order, and the attributes of its <img> elements.
func linksAndImages(t *testing.T, body string) ([]string, []map[string]string) {
	t.Helper()
	var hrefs []string
	var imgs []map[string]string
	z := html.NewTokenizer(strings.NewReader(body))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if z.Err() != io.EOF {
				t.Fatal(z.Err())
			}
			return hrefs, imgs
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		tok := z.Token()
		attrs := map[string]string{}
		for _, a := range tok.Attr {
			attrs[a.Key] = a.Val
		}
		switch tok.Data {
		case "a":
			hrefs = append(hrefs, attrs["href"])
		case "img":
			imgs = append(imgs, attrs)
		}
	}
}
