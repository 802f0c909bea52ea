// Package docsui serves the API reference page and the files of its renderer,
// Stoplight Elements, from the binary itself: /docs must work on a machine that
// cannot reach a public CDN.
//
// The Elements files in elements/ come from the npm registry, pinned to one version
// (elements/VERSION, elements/SOURCE); `make docs-assets` re-fetches them. They
// are served together, licenses included, under
// /docs/assets/elements-<version>-<hash of the files>/, and the page's own
// stylesheet under /docs/assets/<its hash>/: a path changes with the content, so
// assets are cached for a year as immutable; the page names those paths and is
// revalidated on each visit.
package docsui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"html/template"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

//go:embed elements/web-components.min.js elements/styles.min.css elements/VERSION
//go:embed elements/LICENSE elements/web-components.min.js.LICENSE.txt
//go:embed page.html page.css
var files embed.FS

// ElementsVersion is the embedded version of @stoplight/elements.
var ElementsVersion = strings.TrimSpace(string(mustRead("elements/VERSION")))

// elementsFiles are the Elements files served; the bundle's own comment points at
// its LICENSE.txt beside it, so they share one directory.
var elementsFiles = []string{"web-components.min.js", "styles.min.css", "LICENSE", "web-components.min.js.LICENSE.txt"}

// contentSecurityPolicy names everything the page may do: its scripts and styles
// come from this origin only, it may fetch the OpenAPI document and send "try it"
// requests to this origin only, and nothing else (no frames, forms, plugins or
// fonts from anywhere). Elements injects <style> elements at run time (its
// CSS-in-JS), which is why styles also need 'unsafe-inline'; scripts do not.
// Images: the page's empty icon is a data: URL (it spares the browser asking
// for /favicon.ico). No sandbox directive: with scripts and same-origin allowed
// it protects nothing here, and it would block the "Export" download.
var contentSecurityPolicy = strings.Join([]string{
	"default-src 'none'",
	"script-src 'self'",
	"style-src 'self' 'unsafe-inline'",
	"img-src 'self' data:",
	"connect-src 'self'",
	"base-uri 'none'",
	"form-action 'none'",
	"frame-ancestors 'none'",
}, "; ")

// asset is one embedded file with its content-addressed URL path.
type asset struct {
	name        string // file name in the URL
	body        []byte
	contentType string
	etag        string
	integrity   string // Subresource Integrity value for the page's tag
	urlPath     string

	gzipOnce sync.Once
	gzipped  []byte
}

func newAsset(dir, file string) *asset {
	body := mustRead(file)
	sum := sha256.Sum256(body)
	name := path.Base(file)
	contentType := mime.TypeByExtension(path.Ext(name))
	if contentType == "" {
		contentType = "text/plain; charset=utf-8" // LICENSE
	}
	return &asset{
		name:        name,
		body:        body,
		contentType: contentType,
		etag:        `"` + hex.EncodeToString(sum[:16]) + `"`,
		integrity:   "sha256-" + base64.StdEncoding.EncodeToString(sum[:]),
		urlPath:     dir + "/" + name,
	}
}

// contentHash is a short hash of files' names and contents: the part of an asset
// directory's name that makes "immutable" true.
func contentHash(files ...string) string {
	h := sha256.New()
	for _, f := range files {
		body := mustRead(f)
		h.Write([]byte(f + "\x00" + strconv.Itoa(len(body)) + "\x00"))
		h.Write(body)
	}
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// Options configure the page.
type Options struct {
	// Path is where the page is served, e.g. "/docs"; the assets live under
	// Path + "/assets/".
	Path string
	// Title is the page title.
	Title string
	// OpenAPIURL is the document Elements renders, e.g. "/openapi.json".
	OpenAPIURL string
}

// Register adds GET (and HEAD) routes for the page and each asset to mux. The
// routes are exact paths, so any other path under Path is left to the mux's
// fallback (the API's enveloped 404).
func Register(mux *http.ServeMux, opts Options) {
	var paths []string
	for _, f := range elementsFiles {
		paths = append(paths, "elements/"+f)
	}
	elementsDir := opts.Path + "/assets/elements-" + ElementsVersion + "-" + contentHash(paths...)
	assets := map[string]*asset{}
	for _, p := range paths {
		assets[p] = newAsset(elementsDir, p)
	}
	assets["page.css"] = newAsset(opts.Path+"/assets/"+contentHash("page.css"), "page.css")

	mux.Handle("GET "+opts.Path, renderPage(opts, assets["elements/web-components.min.js"], assets["elements/styles.min.css"], assets["page.css"]))
	for _, a := range assets {
		mux.Handle("GET "+a.urlPath, a)
	}
}

// pageTemplate is the HTML page; html/template escapes the values it is given.
var pageTemplate = template.Must(template.ParseFS(files, "page.html"))

type pageHandler struct{ body []byte }

func renderPage(opts Options, script, styles, own *asset) *pageHandler {
	var buf bytes.Buffer
	err := pageTemplate.Execute(&buf, map[string]any{
		"Title": opts.Title, "OpenAPIURL": opts.OpenAPIURL, "ElementsVersion": ElementsVersion,
		"ScriptURL": script.urlPath, "ScriptIntegrity": script.integrity,
		"StylesURL": styles.urlPath, "StylesIntegrity": styles.integrity,
		"OwnURL": own.urlPath, "OwnIntegrity": own.integrity,
	})
	if err != nil {
		// The template and its data are fixed at build time.
		panic("docsui: rendering the page: " + err.Error())
	}
	return &pageHandler{body: buf.Bytes()}
}

func (p *pageHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// The page names the assets' current URLs: revalidate it on every visit.
	h.Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(p.body)
}

func (a *asset) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Vary", "Accept-Encoding")
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.body
	// The Elements bundle is 2 MB and compresses to a third; compress it once.
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = a.gzip()
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

func (a *asset) gzip() []byte {
	a.gzipOnce.Do(func() {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(a.body)
		_ = zw.Close()
		a.gzipped = buf.Bytes()
	})
	return a.gzipped
}

// acceptsGzip is true when the client lists gzip without q=0.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			q := strings.ReplaceAll(params, " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("docsui: embedded file missing: " + name)
	}
	return b
}
