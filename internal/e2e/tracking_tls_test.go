package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/pebbletest"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// Custom tracking domains over HTTPS through the real processes: two api
// processes on one database serve the tracking routes on listeners of their
// own (MAILYARD_TRACKING_TLS_ADDR), with certificates from a real ACME CA
// (Pebble, which validates TLS-ALPN-01 at the first process's listener). A
// domain is verified, its custom tracking domain's CNAME (record 5) too; an
// email sent through the stack carries click links on https://<custom
// domain>, and the click redirects through either process with the one
// certificate the CA issued, shared through the database. A name that is not
// a verified custom domain gets no handshake (and no order), and the click
// presented on another organization's verified custom domain is not
// redirected.
func TestTrackingCustomDomainHTTPS(t *testing.T) {
	t.Parallel()
	const (
		custom       = "track.shop.example"
		trackingHost = "t.mailyard.test"
		// otherCustom is another organization's custom tracking domain.
		otherCustom = "track.other-shop.example"
		// unverified resolves to us (for Pebble) but nobody verified it.
		unverified = "other.shop.example"
		original   = "https://shop.example/orders/42?ref=mail&x=%C3%BC"
	)
	start := time.Now()

	// Pebble validates at the first api process's tracking listener.
	tlsAddrs := []string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	pebble := pebbletest.Start(t, pebbletest.Options{
		TLSPort: portNumber(t, tlsAddrs[0]),
		Hosts:   []string{custom, otherCustom, unverified},
	})

	mx := startMX(t)
	s := startStack(t, topology{env: append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_TRACKING_URL=http://"+trackingHost,
		"MAILYARD_TRACKING_HOST="+trackingHost,
		"MAILYARD_TRACKING_TLS_ADDR="+tlsAddrs[0],
		"MAILYARD_ACME_DIRECTORY="+pebble.DirectoryURL,
		"MAILYARD_ACME_CA="+pebble.CAFile,
		"MAILYARD_ACME_EMAIL=ops@mailyard.example",
	)})
	// The second api process: listeners of its own (the last setting of a
	// name wins).
	httpAddr2, internalAddr2 := testenv.FreeAddr(t), testenv.FreeAddr(t)
	testenv.Start(t, slices.Concat(s.env, []string{
		"MAILYARD_HTTP_ADDR=" + httpAddr2, "MAILYARD_INTERNAL_ADDR=" + internalAddr2, "MAILYARD_TRACKING_TLS_ADDR=" + tlsAddrs[1],
	}), "api")
	for _, addr := range append([]string{httpAddr2}, tlsAddrs...) {
		testenv.WaitListening(t, addr, 30*time.Second)
	}
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	t.Logf("stack up after %s", time.Since(start).Round(time.Millisecond))

	id, _, _ := verifiedDomain(t, s, "shop.example")

	// Clicks on, and the custom domain: record 5, pending.
	patched := callMap(s.api(), "PATCH", fmt.Sprintf("/api/v1/domains/%d/tracking", id), map[string]any{"clicks": true, "custom_domain": custom}, 200)
	tr := patched["domain"].(map[string]any)["tracking"].(map[string]any)
	if tr["clicks"] != true || tr["custom_domain"] != custom || tr["custom_domain_status"] != "pending" {
		t.Fatalf("tracking after PATCH: %v", tr)
	}
	records := callMap(s.api(), "GET", fmt.Sprintf("/api/v1/domains/%d/dns-records", id), nil, 200)["dns_records"].([]any)
	if len(records) != 5 {
		t.Fatalf("records after PATCH: %v", records)
	}
	rec5 := records[4].(map[string]any)
	if rec5["purpose"] != "Tracking (CNAME)" || rec5["type"] != "CNAME" || rec5["name"] != custom || rec5["value"] != trackingHost || rec5["status"] != "pending" {
		t.Fatalf("record 5: %v", rec5)
	}

	// Pending, the custom domain gets no certificate: the handshake fails
	// and the CA is asked nothing.
	assertRefused(t, tlsAddrs[0], custom, pebble.Roots)
	if n := orders(pebble); n != 0 {
		t.Fatalf("Pebble got %d orders for a pending custom domain", n)
	}

	// The customer creates the CNAME; verify until record 5 is verified.
	s.customer.Add(t, custom+". 300 IN CNAME "+trackingHost+".")
	testenv.Eventually(t, 30*time.Second, "custom tracking domain verified", func() bool {
		v := callMap(s.api(), "POST", fmt.Sprintf("/api/v1/domains/%d/verify", id), nil, 200)
		rs := v["dns_records"].([]any)
		return len(rs) == 5 && rs[4].(map[string]any)["status"] == "verified"
	})
	dom := callMap(s.api(), "GET", fmt.Sprintf("/api/v1/domains/%d", id), nil, 200)["domain"].(map[string]any)
	if dom["status"] != "verified" || dom["tracking"].(map[string]any)["custom_domain_status"] != "verified" {
		t.Fatalf("domain after verify: %v", dom)
	}

	// A tracked email through the stack: its link points at the custom
	// domain.
	sendKey := callMap(s.api(), "POST", "/api/v1/credentials", map[string]any{"sending_domain_id": id, "label": "app", "permissions": []string{"send"}}, 201)["secret_key"].(string)
	emailID := callMap(s.api().as(sendKey), "POST", "/api/v1/emails", map[string]any{
		"from":    "shop@shop.example",
		"to":      "ok@rcpt.example",
		"subject": "Your order",
		"text":    "See your order: " + original,
		"html":    `<p>See <a href="` + strings.ReplaceAll(original, "&", "&amp;") + `">your order</a>.</p>`,
	}, 202)["email"].(map[string]any)["id"].(string)
	testenv.Eventually(t, 60*time.Second, "email sent", func() bool {
		return callMap(s.api().as(sendKey), "GET", "/api/v1/emails/"+emailID, nil, 200)["email"].(map[string]any)["status"] == "sent"
	})
	msgs := mx.received("ok@rcpt.example")
	if len(msgs) != 1 {
		t.Fatalf("received %d messages", len(msgs))
	}
	html := htmlPart(t, msgs[0])
	clicks := regexp.MustCompile(`https?://[^"'<>\s]*/t/c/[A-Za-z0-9]+`).FindAllString(html, -1)
	if len(clicks) != 1 || !strings.HasPrefix(clicks[0], "https://"+custom+"/t/c/") {
		t.Fatalf("click links %q in the HTML, want one on https://%s/t/c/:\n%s", clicks, custom, html)
	}
	clickURL := clicks[0]
	if strings.Contains(html, original) || strings.Contains(html, strings.ReplaceAll(original, "&", "&amp;")) {
		t.Fatalf("the original link is still in the HTML:\n%s", html)
	}

	// The click through the first process: the certificate is obtained
	// (TLS-ALPN-01 validated at this very listener) and the click redirects
	// to the original URL.
	res1, err := fetch(tlsAddrs[0], clickURL, pebble.Roots)
	if err != nil {
		t.Fatalf("click through the first process: %v", err)
	}
	if res1.status != http.StatusFound || res1.location != original {
		t.Fatalf("click through the first process: %d to %q, want 302 to %q", res1.status, res1.location, original)
	}
	cert1 := res1.chain[0]
	inter := x509.NewCertPool()
	for _, c := range res1.chain[1:] {
		inter.AddCert(c)
	}
	if _, err := cert1.Verify(x509.VerifyOptions{DNSName: custom, Roots: pebble.Roots, Intermediates: inter}); err != nil {
		t.Fatalf("certificate does not verify for %s against Pebble's root: %v", custom, err)
	}

	// The second process serves the same certificate, from the database:
	// the CA issued one.
	res2, err := fetch(tlsAddrs[1], clickURL, pebble.Roots)
	if err != nil {
		t.Fatalf("click through the second process: %v", err)
	}
	if res2.status != http.StatusFound || res2.location != original {
		t.Fatalf("click through the second process: %d to %q", res2.status, res2.location)
	}
	if res2.chain[0].SerialNumber.Cmp(cert1.SerialNumber) != 0 {
		t.Fatalf("second process serves serial %x, first %x", res2.chain[0].SerialNumber, cert1.SerialNumber)
	}
	if n, orders := issued(pebble), orders(pebble); n != 1 || orders != 1 {
		t.Fatalf("Pebble got %d orders and issued %d certificates, want 1 and 1:\n%s", orders, n, pebble.Output())
	}

	// The click is recorded (by whichever process; once).
	st := testenv.OpenStore(t, s.databaseURL)
	testenv.Eventually(t, 30*time.Second, "click recorded", func() bool {
		var r store.EmailRecipient
		err := st.DB.NewSelect().Model(&r).ExcludeColumn("signed_message").Where("email_id = ?", emailID).Scan(context.Background())
		return err == nil && r.ClickedAt != nil
	})

	// A name that resolves to us but is no verified custom domain: no
	// handshake, no order.
	assertRefused(t, tlsAddrs[0], unverified, pebble.Roots)
	assertRefused(t, tlsAddrs[1], trackingHost, pebble.Roots)
	if n, orders := issued(pebble), orders(pebble); n != 1 || orders != 1 {
		t.Fatalf("Pebble got %d orders and issued %d certificates after refused names, want 1 and 1", orders, n)
	}

	// Another organization verifies its own domain and custom tracking
	// domain; the shop's click token presented there is not redirected.
	out := s.run("org", "create", "other-shop")
	otherKey := regexp.MustCompile(`myk_[0-9A-Za-z]+`).FindString(out)
	if otherKey == "" {
		t.Fatalf("org create printed no key: %s", out)
	}
	other := *s
	other.adminKey = otherKey
	otherID, _, _ := verifiedDomain(t, &other, "other-shop.example")
	callMap(other.api(), "PATCH", fmt.Sprintf("/api/v1/domains/%d/tracking", otherID), map[string]any{"custom_domain": otherCustom}, 200)
	s.customer.Add(t, otherCustom+". 300 IN CNAME "+trackingHost+".")
	testenv.Eventually(t, 30*time.Second, "other custom tracking domain verified", func() bool {
		rs := callMap(other.api(), "POST", fmt.Sprintf("/api/v1/domains/%d/verify", otherID), nil, 200)["dns_records"].([]any)
		return len(rs) == 5 && rs[4].(map[string]any)["status"] == "verified"
	})
	onOther := strings.Replace(clickURL, "https://"+custom+"/", "https://"+otherCustom+"/", 1)
	for i, addr := range tlsAddrs {
		res, err := fetch(addr, onOther, pebble.Roots)
		if err != nil {
			t.Fatalf("click on %s through process %d: %v", otherCustom, i+1, err)
		}
		if res.status != http.StatusNotFound || res.location != "" {
			t.Fatalf("the shop's click on %s through process %d: %d to %q, want 404", otherCustom, i+1, res.status, res.location)
		}
		if err := res.chain[0].VerifyHostname(otherCustom); err != nil {
			t.Fatal(err)
		}
	}
	if n, orders := issued(pebble), orders(pebble); n != 2 || orders != 2 {
		t.Fatalf("Pebble got %d orders and issued %d certificates, want 2 and 2 (one per verified custom domain)", orders, n)
	}
	// And the shop's own domain still redirects.
	if res, err := fetch(tlsAddrs[1], clickURL, pebble.Roots); err != nil || res.status != http.StatusFound || res.location != original {
		t.Fatalf("click on the shop's domain after the other's: %+v %v", res, err)
	}

	// The shop removes its custom domain: record 5 goes, and neither process
	// completes a handshake for it any more, certificate in the cache or not.
	removed := callMap(s.api(), "PATCH", fmt.Sprintf("/api/v1/domains/%d/tracking", id), map[string]any{"custom_domain": nil}, 200)
	if tr := removed["domain"].(map[string]any)["tracking"].(map[string]any); tr["custom_domain"] != nil || tr["custom_domain_status"] != nil || tr["clicks"] != true {
		t.Fatalf("tracking after removing the custom domain: %v", tr)
	}
	if rs := callMap(s.api(), "GET", fmt.Sprintf("/api/v1/domains/%d/dns-records", id), nil, 200)["dns_records"].([]any); len(rs) != 4 {
		t.Fatalf("records after removing the custom domain: %v", rs)
	}
	for _, addr := range tlsAddrs {
		assertRefused(t, addr, custom, pebble.Roots)
	}
	if n := orders(pebble); n != 2 {
		t.Fatalf("Pebble got %d orders after the removal, want 2", n)
	}
	t.Logf("done after %s", time.Since(start).Round(time.Millisecond))
}

// clickResult is a tracking route's answer over HTTPS.
type clickResult struct {
	status   int
	location string
	chain    []*x509.Certificate
}

// fetch GETs rawURL (https://<name>/...) at addr, as a browser that resolved
// name to addr does: SNI and Host are the URL's name, the certificate must
// verify for it against roots, and redirects are not followed.
func fetch(addr, rawURL string, roots *x509.CertPool) (*clickResult, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{
		Transport:     tr,
		Timeout:       60 * time.Second, // the first handshake obtains the certificate
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Get(rawURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return &clickResult{status: resp.StatusCode, location: resp.Header.Get("Location"), chain: resp.TLS.PeerCertificates}, nil
}

// assertRefused checks that the listener at addr refuses a TLS handshake
// for name (the server's alert, not a client-side failure).
func assertRefused(t *testing.T, addr, name string, roots *x509.CertPool) {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err == nil {
		conn.Close()
		t.Fatalf("%s completes a TLS handshake for %s", addr, name)
	}
	if !strings.Contains(err.Error(), "remote error: tls") {
		t.Fatalf("handshake at %s for %s: %v, want the server to refuse it", addr, name, err)
	}
}

// issued counts the certificates Pebble issued.
func issued(p *pebbletest.Pebble) int {
	return strings.Count(p.Output(), "Issued certificate serial")
}

// orders is the number of orders Pebble holds.
func orders(p *pebbletest.Pebble) int {
	n := 0
	for _, m := range regexp.MustCompile(`There are now (\d+) orders in the db`).FindAllStringSubmatch(p.Output(), -1) {
		if k, _ := strconv.Atoi(m[1]); k > n {
			n = k
		}
	}
	return n
}

func portNumber(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// htmlPart is the decoded text/html part of a message.
func htmlPart(t *testing.T, raw []byte) string {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	html, found, err := findHTML(msg.Header, msg.Body)
	if err != nil || !found {
		t.Fatalf("no text/html part (%v):\n%s", err, raw)
	}
	return html
}

type partHeader interface{ Get(string) string }

func findHTML(h partHeader, body io.Reader) (string, bool, error) {
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return "", false, err
	}
	if strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if err == io.EOF {
				return "", false, nil
			}
			if err != nil {
				return "", false, err
			}
			if html, found, err := findHTML(p.Header, p); found || err != nil {
				return html, found, err
			}
		}
	}
	if mt != "text/html" {
		return "", false, nil
	}
	var r io.Reader = body
	switch strings.ToLower(h.Get("Content-Transfer-Encoding")) {
	case "quoted-printable":
		r = quotedprintable.NewReader(body)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, &newlineStripper{body})
	}
	b, err := io.ReadAll(r)
	return string(b), err == nil, err
}

// newlineStripper drops the line breaks of a base64 body.
type newlineStripper struct{ r io.Reader }

func (n *newlineStripper) Read(p []byte) (int, error) {
	k, err := n.r.Read(p)
	out := p[:0]
	for _, c := range p[:k] {
		if c != '\r' && c != '\n' {
			out = append(out, c)
		}
	}
	return len(out), err
}

// callMap is the typed client's do, into a map: this test reads parts of
// answers (tracking, record 5) field by field.
func callMap(c *apiClient, method, path string, body any, want int) map[string]any {
	c.t.Helper()
	var out map[string]any
	c.do(method, path, body, want, &out)
	return out
}
