package docsui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	Register(mux, Options{Path: "/docs", Title: "Test <Reference>", OpenAPIURL: "/openapi.json"})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, method, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// No transparent decompression: the test looks at the bytes sent.
	res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

var linked = regexp.MustCompile(`(?:href|src)="(/docs/assets/[^"]+)" integrity="([^"]+)"`)

// TestPageLinksEveryAssetWithItsIntegrity checks the page's tags against what the
// asset routes serve, and the headers that let browsers cache them for a year.
func TestPageLinksEveryAssetWithItsIntegrity(t *testing.T) {
	srv := newServer(t)
	res, page := get(t, http.MethodGet, srv.URL+"/docs", nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /docs: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if !strings.Contains(string(page), "<title>Test &lt;Reference&gt;</title>") {
		t.Errorf("the title is not escaped: %s", page)
	}
	links := linked.FindAllStringSubmatch(string(page), -1)
	if len(links) != 3 {
		t.Fatalf("want the script and two stylesheets linked, got %q in\n%s", links, page)
	}
	for _, l := range links {
		res, body := get(t, http.MethodGet, srv.URL+l[1], nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", l[1], res.StatusCode)
		}
		sum := sha256.Sum256(body)
		if got := "sha256-" + base64.StdEncoding.EncodeToString(sum[:]); got != html.UnescapeString(l[2]) {
			t.Errorf("%s: integrity %s in the page, %s served", l[1], l[2], got)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
			t.Errorf("%s: Cache-Control %q", l[1], cc)
		}
		ext := l[1][strings.LastIndex(l[1], "."):]
		want := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}[ext]
		if ct := res.Header.Get("Content-Type"); ct != want {
			t.Errorf("%s: Content-Type %q, want %q", l[1], ct, want)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", l[1])
		}
	}
	// The licenses sit beside the bundle, where its header comment points.
	script := links[len(links)-1][1]
	if !strings.HasSuffix(script, "/web-components.min.js") {
		t.Fatalf("the script is not linked last: %q", links)
	}
	if !strings.Contains(script, "/elements-"+ElementsVersion+"-") {
		t.Errorf("the script's path does not name Elements %s: %s", ElementsVersion, script)
	}
	for _, name := range []string{"LICENSE", "web-components.min.js.LICENSE.txt"} {
		u := strings.TrimSuffix(script, "web-components.min.js") + name
		res, body := get(t, http.MethodGet, srv.URL+u, nil)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") || len(body) < 1000 {
			t.Errorf("GET %s: %d %s, %d bytes", u, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
	}
}

// TestPageHasNoInlineCode: the policy allows scripts and stylesheets from the
// origin only, so the page must carry none inline.
func TestPageHasNoInlineCode(t *testing.T) {
	srv := newServer(t)
	res, page := get(t, http.MethodGet, srv.URL+"/docs", nil)
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self';", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp+";", want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, banned := range []string{"unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(csp, banned) {
			t.Errorf("CSP %q allows %q", csp, banned)
		}
	}
	if regexp.MustCompile(`<script(\s[^>]*)?>[^<]`).Match(page) || bytes.Contains(page, []byte("<script>")) {
		t.Errorf("the page has an inline script:\n%s", page)
	}
	if bytes.Contains(page, []byte(" style=")) || bytes.Contains(page, []byte("<style")) || regexp.MustCompile(`\son[a-z]+=`).Match(page) {
		t.Errorf("the page has inline style or an event handler attribute:\n%s", page)
	}
	if res.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("the page's Cache-Control is %q; it names the assets' current paths and must be revalidated", res.Header.Get("Cache-Control"))
	}
}

func TestAssetsCompressAndRevalidate(t *testing.T) {
	srv := newServer(t)
	_, page := get(t, http.MethodGet, srv.URL+"/docs", nil)
	script := linked.FindAllStringSubmatch(string(page), -1)[2][1]
	plainRes, plain := get(t, http.MethodGet, srv.URL+script, nil)
	if plainRes.Header.Get("Content-Encoding") != "" || !bytes.Equal(plain, mustRead("elements/web-components.min.js")) {
		t.Fatalf("without Accept-Encoding: encoding %q, %d bytes", plainRes.Header.Get("Content-Encoding"), len(plain))
	}
	zres, zbody := get(t, http.MethodGet, srv.URL+script, map[string]string{"Accept-Encoding": "br, gzip"})
	if zres.Header.Get("Content-Encoding") != "gzip" || zres.Header.Get("Vary") != "Accept-Encoding" || len(zbody) >= len(plain)/2 {
		t.Fatalf("with gzip: encoding %q, Vary %q, %d bytes of %d", zres.Header.Get("Content-Encoding"), zres.Header.Get("Vary"), len(zbody), len(plain))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zbody))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unzipped, plain) {
		t.Fatalf("gzip body does not decompress to the file: %v", err)
	}
	if res, _ := get(t, http.MethodGet, srv.URL+script, map[string]string{"Accept-Encoding": "gzip;q=0"}); res.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 got Content-Encoding %q", res.Header.Get("Content-Encoding"))
	}
	res, body := get(t, http.MethodGet, srv.URL+script, map[string]string{"If-None-Match": plainRes.Header.Get("ETag")})
	if res.StatusCode != http.StatusNotModified || len(body) != 0 {
		t.Errorf("If-None-Match: %d with %d bytes", res.StatusCode, len(body))
	}
	res, body = get(t, http.MethodHead, srv.URL+script, nil)
	if res.StatusCode != http.StatusOK || len(body) != 0 || res.Header.Get("Content-Length") != plainRes.Header.Get("Content-Length") {
		t.Errorf("HEAD: %d, %d bytes, Content-Length %q", res.StatusCode, len(body), res.Header.Get("Content-Length"))
	}
}

// TestPinnedVersionIsTheEmbeddedOne: the Makefile's pin, the fetched files'
// record and the embedded version agree, so a changed pin without a
// `make docs-assets` (or the reverse) is caught.
func TestPinnedVersionIsTheEmbeddedOne(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^ELEMENTS_VER\s*:=\s*(\S+)`).FindSubmatch(makefile)
	if pin == nil || string(pin[1]) != ElementsVersion {
		t.Errorf("Makefile pins %q, the embedded files are %s: run make docs-assets", pin, ElementsVersion)
	}
	source, err := os.ReadFile("elements/SOURCE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(source), "@stoplight/elements@"+ElementsVersion+"\n") {
		t.Errorf("elements/SOURCE does not record version %s:\n%s", ElementsVersion, source)
	}
}
