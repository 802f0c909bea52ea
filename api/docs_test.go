package api_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNeedNoKey: the reference page and its assets are public routes of the
// API's own listener; other paths under /docs keep the enveloped 404.
func TestDocsNeedNoKey(t *testing.T) {
	h := newHarness(t)
	page := h.do(http.MethodGet, "/docs", "", nil)
	if page.Status != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs: %d %s: %s", page.Status, page.Header.Get("Content-Type"), page.Raw)
	}
	if !strings.Contains(page.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("CSP %q", page.Header.Get("Content-Security-Policy"))
	}
	if !strings.Contains(string(page.Raw), `apiDescriptionUrl="/openapi.json"`) {
		t.Errorf("the page does not render /openapi.json:\n%s", page.Raw)
	}
	if doc := h.do(http.MethodGet, "/openapi.json", "", nil); doc.Status != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", doc.Status)
	}
	assets := regexp.MustCompile(`(?:href|src)="(/docs/assets/[^"]+)"`).FindAllStringSubmatch(string(page.Raw), -1)
	if len(assets) != 3 {
		t.Fatalf("want three assets linked, got %q", assets)
	}
	for _, a := range assets {
		res := h.do(http.MethodGet, a[1], "", nil)
		if res.Status != http.StatusOK || !strings.Contains(res.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("GET %s: %d, Cache-Control %q", a[1], res.Status, res.Header.Get("Cache-Control"))
		}
	}
	for _, path := range []string{"/docs/", "/docs/assets/", "/docs/assets/000000000000/web-components.min.js"} {
		h.do(http.MethodGet, path, "", nil).expectError(t, http.StatusNotFound, "not_found")
	}
	h.do(http.MethodPost, "/docs", "", nil).expectError(t, http.StatusNotFound, "not_found")
}
