package trackingtls_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme/autocert"

	"github.com/mailyard/mailyard/internal/pebbletest"
	"github.com/mailyard/mailyard/internal/secrets"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
	"github.com/mailyard/mailyard/internal/trackingtls"
)

const (
	customDomain = "track.shop.example"
	otherDomain  = "links.other-shop.example"
	// refusedDomain resolves to us like the others but is not verified.
	refusedDomain = "track.not-verified.example"
)

// world is what the api processes of a test share: the database, the
// encryption key, the CA (Pebble), and the port the CA validates
// TLS-ALPN-01 challenges at, which the first process listens on.
type world struct {
	st     *store.Store
	box    *secrets.Box
	pebble *pebbletest.Pebble
	tlsLn  net.Listener
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	p := pebbletest.Start(t, pebbletest.Options{
		TLSPort: ln.Addr().(*net.TCPAddr).Port,
		Hosts:   []string{customDomain, otherDomain, refusedDomain},
	})
	return &world{st: testenv.OpenStore(t, testenv.PostgresURL(t)), box: newBox(t), pebble: p, tlsLn: ln}
}

func newBox(t testing.TB) *secrets.Box {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	box, err := secrets.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// process is one api process: its own Manager and Cache on the shared
// database, serving on its own listener.
type process struct {
	addr string
	// acme counts the requests the manager made to the CA.
	acme *countingTransport

	logs testenv.SyncBuffer // what the listener logged, as JSON lines

	mu    sync.Mutex
	asked []string // the names Allowed was asked about
}

// warnings are the messages the listener logged at WARN and above.
func (p *process) warnings() string {
	var out []string
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func (p *process) askedAbout() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// start runs a process on ln (nil: a listener of its own) whose Allowed
// accepts the names in verified.
func (w *world) start(t *testing.T, ln net.Listener, verified ...string) *process {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	p := &process{addr: ln.Addr().String(), acme: &countingTransport{rt: w.pebble.HTTPClient.Transport}}
	m, err := trackingtls.NewManager(trackingtls.Options{
		DirectoryURL: w.pebble.DirectoryURL,
		Email:        "ops@mailyard.example",
		HTTPClient:   &http.Client{Transport: p.acme, Timeout: 30 * time.Second},
		Allowed: func(_ context.Context, host string) (bool, error) {
			p.mu.Lock()
			p.asked = append(p.asked, host)
			p.mu.Unlock()
			for _, v := range verified {
				if host == v {
					return true, nil
				}
			}
			return false, nil
		},
		Cache: trackingtls.NewCache(w.st, w.box),
	})
	if err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "tracked %s%s", r.Host, r.URL.Path)
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	logger := slog.New(slog.NewJSONHandler(&p.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { served <- trackingtls.ServeListener(ctx, ln, m, handler, logger) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return p
}

// get fetches https://host:port/x from the process (connecting to it
// whatever host resolves to, with host as SNI), trusting only Pebble's root.
// It returns the body and the certificate the process presented.
func (w *world) get(t *testing.T, p *process, host string) (string, *x509.Certificate, error) {
	t.Helper()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, p.addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: w.pebble.Roots, MinVersion: tls.VersionTLS12},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	_, port, _ := net.SplitHostPort(p.addr)
	resp, err := client.Get("https://" + net.JoinHostPort(host, port) + "/x")
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("status %s", resp.Status)
	}
	return string(body), resp.TLS.PeerCertificates[0], nil
}

// countingTransport counts the requests made to the ACME CA.
type countingTransport struct {
	rt http.RoundTripper
	mu sync.Mutex
	n  int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *countingTransport) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// rows is the acme_cache table as the database holds it.
func rows(t *testing.T, st *store.Store) []store.ACMECacheEntry {
	t.Helper()
	var rs []store.ACMECacheEntry
	if err := st.DB.NewSelect().Model(&rs).Order("key").Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rs
}

// A verified custom domain gets a certificate from the CA on its first
// handshake (TLS-ALPN-01, really validated against our listener), the handler
// answers through it, and what is cached is sealed.
func TestCertificateForVerifiedDomain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t, w.tlsLn, customDomain)

	body, cert, err := w.get(t, p, "Track.Shop.Example")
	if err != nil {
		t.Fatalf("GET: %v\n%s", err, w.pebble.Output())
	}
	if !strings.EqualFold(body, "tracked track.shop.example:"+portOf(p.addr)+"/x") {
		t.Fatalf("body %q", body)
	}
	// The client verified the chain already; check it names the domain and
	// comes from Pebble's root, not from anything else.
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: customDomain, Roots: w.pebble.Roots, Intermediates: intermediates(t, w, p)}); err != nil {
		t.Fatalf("certificate does not verify against Pebble's root: %v", err)
	}
	for _, h := range p.askedAbout() {
		if h != customDomain {
			t.Errorf("Allowed was asked about %q, not the normalized %q", h, customDomain)
		}
	}

	t.Run("sealed at rest", func(t *testing.T) {
		rs := rows(t, w.st)
		keys := map[string]bool{}
		for _, r := range rs {
			keys[r.Key] = true
			for _, plain := range []string{"PRIVATE KEY", "BEGIN", "CERTIFICATE"} {
				if bytes.Contains(r.Data, []byte(plain)) {
					t.Errorf("row %q holds %q in plain text", r.Key, plain)
				}
			}
			if _, err := w.box.Open(r.Data, trackingtls.Binding(r.Key)); err != nil {
				t.Errorf("row %q does not open with the key that sealed it: %v", r.Key, err)
			}
			if _, err := newBox(t).Open(r.Data, trackingtls.Binding(r.Key)); !errors.Is(err, secrets.ErrDecrypt) {
				t.Errorf("row %q opens with another key: %v", r.Key, err)
			}
			if strings.HasSuffix(r.Key, "+token") {
				t.Errorf("challenge certificate %q left behind", r.Key)
			}
		}
		// The account key and the ECDSA certificate of the domain.
		if !keys["acme_account+key"] || !keys[customDomain] || len(rs) != 2 {
			t.Fatalf("cache keys %v", keys)
		}

		// Opened, the certificate's entry is autocert's PEM: the private key
		// and the chain the process serves.
		plain, err := trackingtls.NewCache(w.st, w.box).Get(context.Background(), customDomain)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(plain, []byte("PRIVATE KEY")) || !bytes.Contains(plain, []byte("CERTIFICATE")) {
			t.Fatal("opened entry is not a key and certificate")
		}
		// A cache with another encryption key refuses the entry rather than
		// taking it for a miss (which would order a certificate and overwrite
		// it for every process).
		if _, err := trackingtls.NewCache(w.st, newBox(t)).Get(context.Background(), customDomain); err == nil || errors.Is(err, autocert.ErrCacheMiss) {
			t.Fatalf("Get with another key: %v", err)
		}
		// A sealed entry copied to another key does not open there.
		if err := w.st.PutACMECacheEntry(context.Background(), "copied.example", rs[1].Data); err != nil {
			t.Fatal(err)
		}
		if _, err := trackingtls.NewCache(w.st, w.box).Get(context.Background(), "copied.example"); !errors.Is(err, secrets.ErrDecrypt) {
			t.Fatalf("copied entry: %v", err)
		}
	})
}

// Two api processes share one certificate through the database: the second
// serves the first one's certificate without asking the CA anything, and a
// certificate the second orders is validated through the first (the CA's
// connection reaches whichever process; the challenge certificate is shared
// too).
func TestProcessesShareCertificates(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	first := w.start(t, w.tlsLn, customDomain, otherDomain)
	second := w.start(t, nil, customDomain, otherDomain)

	_, cert1, err := w.get(t, first, customDomain)
	if err != nil {
		t.Fatalf("GET through the first process: %v\n%s", err, w.pebble.Output())
	}
	_, cert2, err := w.get(t, second, customDomain)
	if err != nil {
		t.Fatalf("GET through the second process: %v", err)
	}
	if cert1.SerialNumber.Cmp(cert2.SerialNumber) != 0 {
		t.Fatalf("second process serves serial %x, first %x", cert2.SerialNumber, cert1.SerialNumber)
	}
	if n := second.acme.requests(); n != 0 {
		t.Fatalf("second process made %d requests to the CA for a cached certificate", n)
	}

	// The second process orders otherDomain; the CA validates at the first
	// process's port, which answers with the challenge certificate the
	// second one put in the cache.
	before := first.acme.requests()
	_, cert3, err := w.get(t, second, otherDomain)
	if err != nil {
		t.Fatalf("GET %s through the second process: %v\n%s", otherDomain, err, w.pebble.Output())
	}
	if second.acme.requests() == 0 || first.acme.requests() != before {
		t.Fatalf("CA requests: second process %d, first %d (had %d)", second.acme.requests(), first.acme.requests(), before)
	}
	if err := cert3.VerifyHostname(otherDomain); err != nil {
		t.Fatal(err)
	}
	// And the first process serves it from the cache in turn.
	_, cert4, err := w.get(t, first, otherDomain)
	if err != nil {
		t.Fatal(err)
	}
	if cert4.SerialNumber.Cmp(cert3.SerialNumber) != 0 || first.acme.requests() != before {
		t.Fatalf("first process serves serial %x for %s, ordered %x (CA requests %d, had %d)",
			cert4.SerialNumber, otherDomain, cert3.SerialNumber, first.acme.requests(), before)
	}
	for _, r := range rows(t, w.st) {
		if strings.HasSuffix(r.Key, "+token") {
			t.Errorf("challenge certificate %q left behind", r.Key)
		}
	}
}

// A verified name the CA will not certify (here one it cannot resolve, as
// when a customer removed the CNAME) fails the handshake and is logged as a
// warning, naming it: the operator learns before the customers' links fail.
func TestCertificateFailureIsAWarning(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const gone = "track.cname-removed.example"
	p := w.start(t, w.tlsLn, gone)
	if _, _, err := w.get(t, p, gone); err == nil {
		t.Fatal("GET for a name the CA cannot validate succeeded")
	}
	testenv.Eventually(t, 10*time.Second, "the warning", func() bool { return strings.Contains(p.warnings(), gone) })
	if n := p.acme.requests(); n == 0 {
		t.Fatal("no order was placed, so this proves nothing")
	}
}

// A name Allowed refuses (it resolves to us all the same: anyone can point a
// name at our address) fails the handshake, and nothing is asked of the CA.
// A failing Allowed (the database is down) fails the handshake too.
func TestRefusedHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.start(t, w.tlsLn, customDomain)

	_, _, err := w.get(t, p, refusedDomain)
	if err == nil {
		t.Fatal("GET for a refused name succeeded")
	}
	if !strings.Contains(err.Error(), "remote error: tls") {
		t.Fatalf("GET for a refused name: %v, want the handshake refused", err)
	}
	if n := p.acme.requests(); n != 0 {
		t.Fatalf("%d requests to the CA for a refused name", n)
	}
	if rs := rows(t, w.st); len(rs) != 0 {
		t.Fatalf("cache holds %d entries after a refused name, e.g. %q", len(rs), rs[0].Key)
	}
	if asked := p.askedAbout(); len(asked) == 0 || asked[0] != refusedDomain {
		t.Fatalf("Allowed was asked about %v", asked)
	}
	if w := p.warnings(); w != "" {
		t.Fatalf("a refused name is a warning: %s", w)
	}

	// The manager's host policy, asked directly: normalized names, errors.
	failing, err := trackingtls.NewManager(trackingtls.Options{
		DirectoryURL: w.pebble.DirectoryURL,
		Allowed: func(_ context.Context, host string) (bool, error) {
			if host != customDomain {
				return false, fmt.Errorf("asked about %q", host)
			}
			return false, errors.New("database is down")
		},
		Cache: trackingtls.NewCache(w.st, w.box),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := failing.HostPolicy(context.Background(), "Track.Shop.Example."); err == nil || !strings.Contains(err.Error(), "database is down") {
		t.Fatalf("host policy with a failing Allowed: %v", err)
	}
	if dir := failing.Client.DirectoryURL; dir != w.pebble.DirectoryURL {
		t.Fatalf("directory %q", dir)
	}
}

func TestNewManagerOptions(t *testing.T) {
	allowed := func(context.Context, string) (bool, error) { return true, nil }
	cache := autocert.DirCache(t.TempDir())
	m, err := trackingtls.NewManager(trackingtls.Options{Allowed: allowed, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if m.Client.DirectoryURL != "https://acme-v02.api.letsencrypt.org/directory" {
		t.Fatalf("default directory %q", m.Client.DirectoryURL)
	}
	if m.Prompt("https://example/tos") != true {
		t.Fatal("terms of service not accepted")
	}
	if err := m.HostPolicy(context.Background(), "Track.Shop.Example."); err != nil {
		t.Fatal(err)
	}
	if _, err := trackingtls.NewManager(trackingtls.Options{Cache: cache}); err == nil {
		t.Fatal("no Allowed accepted")
	}
	if _, err := trackingtls.NewManager(trackingtls.Options{Allowed: allowed}); err == nil {
		t.Fatal("no Cache accepted")
	}
	refusing, err := trackingtls.NewManager(trackingtls.Options{
		Allowed: func(context.Context, string) (bool, error) { return false, nil }, Cache: cache,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := refusing.HostPolicy(context.Background(), "track.shop.example"); !errors.Is(err, trackingtls.ErrNotAllowed) {
		t.Fatalf("refused: %v", err)
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"track.shop.example":  "track.shop.example",
		"Track.Shop.Example.": "track.shop.example",
		"TRACK.SHOP.EXAMPLE":  "track.shop.example",
	} {
		if got := trackingtls.NormalizeHost(in); got != want {
			t.Errorf("NormalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// The cache's Get/Put/Delete on both databases.
func TestCache(t *testing.T) {
	testenv.Dialects(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		c := trackingtls.NewCache(st, newBox(t))

		if _, err := c.Get(ctx, customDomain); !errors.Is(err, autocert.ErrCacheMiss) {
			t.Fatalf("Get of a missing key: %v, want ErrCacheMiss", err)
		}
		if err := c.Delete(ctx, customDomain); err != nil {
			t.Fatalf("Delete of a missing key: %v", err)
		}
		secret := []byte("-----BEGIN EC PRIVATE KEY-----\nnot really\n-----END EC PRIVATE KEY-----\n")
		if err := c.Put(ctx, customDomain, secret); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, customDomain); err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("Get after Put: %q, %v", got, err)
		}
		raw, err := st.ACMECacheEntry(ctx, customDomain)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw.Data, []byte("PRIVATE KEY")) {
			t.Fatal("stored in plain text")
		}
		if err := c.Put(ctx, customDomain, []byte("renewed")); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, customDomain); err != nil || string(got) != "renewed" {
			t.Fatalf("Get after a second Put: %q, %v", got, err)
		}
		if err := c.Put(ctx, otherDomain, []byte("other")); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, customDomain); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, customDomain); !errors.Is(err, autocert.ErrCacheMiss) {
			t.Fatalf("Get after Delete: %v, want ErrCacheMiss", err)
		}
		if got, err := c.Get(ctx, otherDomain); err != nil || string(got) != "other" {
			t.Fatalf("other key after Delete: %q, %v", got, err)
		}
	})
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// intermediates are the certificates after the leaf the process presents.
func intermediates(t *testing.T, w *world, p *process) *x509.CertPool {
	t.Helper()
	conn, err := tls.Dial("tcp", p.addr, &tls.Config{ServerName: customDomain, RootCAs: w.pebble.Roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pool := x509.NewCertPool()
	for _, c := range conn.ConnectionState().PeerCertificates[1:] {
		pool.AddCert(c)
	}
	return pool
}
