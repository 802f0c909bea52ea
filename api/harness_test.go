package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness is a real API on a real HTTP server over a throwaway PostgreSQL database
// and the package's Temporal dev server.
type harness struct {
	t        *testing.T
	srv      *httptest.Server
	api      *api.Server
	store    *store.Store
	cfg      *config.Config
	temporal client.Client
	orgID    int64
	adminKey string
	dbURL    string
	logger   *slog.Logger
}

func newHarness(t *testing.T) *harness { return newHarnessWith(t, nil) }

// newHarnessWith sets extra environment variables of the configuration. The
// rate limit is high unless a test sets it: tests that are not about it send
// requests as fast as they like, yet every answer carries the headers.
func newHarnessWith(t *testing.T, env map[string]string) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dbURL := testenv.PostgresURL(t)
	st := testenv.OpenStore(t, dbURL)
	vars := map[string]string{
		"MAILYARD_DATABASE_URL":   "postgres://unused",
		"MAILYARD_ENCRYPTION_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"MAILYARD_INTERNAL_TOKEN": "internal-token-for-tests",
		"MAILYARD_RATE_LIMIT":     "100000/s",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.LoadFrom(func(name string) string { return vars[name] }, config.Need{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	a := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: logger})
	go a.Run(ctx)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	h := &harness{t: t, srv: srv, api: a, store: st, cfg: cfg, temporal: tc, dbURL: dbURL, logger: logger}
	h.orgID, h.adminKey = h.newOrg("acme")
	return h
}

// newOrg creates an organization with an admin key.
func (h *harness) newOrg(name string) (int64, string) {
	h.t.Helper()
	secret := h.newKeySecret()
	org, err := h.store.CreateOrganizationWithKey(context.Background(), name, keyauth.WithSecret(secret, &store.APIKey{
		Label: "bootstrap", Username: "boot", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		h.t.Fatal(err)
	}
	return org.ID, secret
}

func (h *harness) newKeySecret() string {
	secret, err := keys.NewAPIKey()
	if err != nil {
		h.t.Fatal(err)
	}
	return secret
}

// response is a decoded answer.
type response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

func (h *harness) do(method, path, key string, body any) response {
	h.t.Helper()
	return h.doAt(h.srv.URL, method, path, key, body, nil)
}

// doAt sends a request to the API at base with extra headers.
func (h *harness) doAt(base, method, path, key string, body any, header map[string]string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	case io.Reader:
		rd = b
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &r.Body)
	}
	return r
}

// expectError checks the error envelope's status and code.
func (r response) expectError(t *testing.T, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
	}
	if r.Body["status"] != "error" {
		t.Fatalf("not an error envelope: %s", r.Raw)
	}
	e, _ := r.Body["error"].(map[string]any)
	if e == nil || e["code"] != code || e["message"] == "" {
		t.Fatalf("error code %v, want %s: %s", e["code"], code, r.Raw)
	}
	if _, has := e["details"]; has {
		if d, _ := e["details"].([]any); len(d) == 0 {
			t.Fatalf("details present but empty: %s", r.Raw)
		}
	}
}

// detailLocations lists the locations of an error's details, in order.
func (r response) detailLocations() []string {
	var locs []string
	e, _ := r.Body["error"].(map[string]any)
	details, _ := e["details"].([]any)
	for _, d := range details {
		loc, _ := d.(map[string]any)["location"].(string)
		locs = append(locs, loc)
	}
	return locs
}

// data returns the success envelope's data after checking status.
func (r response) data(t *testing.T, status int) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
	}
	if r.Body["status"] != "success" {
		t.Fatalf("not a success envelope: %s", r.Raw)
	}
	d, ok := r.Body["data"].(map[string]any)
	if !ok {
		t.Fatalf("no data object: %s", r.Raw)
	}
	return d
}

// apiWithTemporalAt is an API on the harness's store and configuration
// whose Temporal client dials addr, lazily: the tests of what happens while
// Temporal cannot be reached give an address where it cannot.
func (h *harness) apiWithTemporalAt(addr string) *api.Server {
	h.t.Helper()
	tc, err := client.NewLazyClient(client.Options{HostPort: addr})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(tc.Close)
	return api.New(api.Deps{Config: h.cfg, Store: h.store, Temporal: tc, Logger: discardLogger()})
}

// onOwnTemporal starts a Temporal dev server for this test alone and an API
// on it, and returns a client of that server and the API's URL: a test
// whose workers must take no other test's workflows needs it (domain and
// email ids, and so workflow ids, repeat across the tests' databases).
func (h *harness) onOwnTemporal() (client.Client, string) {
	h.t.Helper()
	addr := testenv.OwnTemporal(h.t)
	tc, err := client.Dial(client.Options{HostPort: addr})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(tc.Close)
	return tc, httpServer(h.t, h.apiWithTemporalAt(addr).Handler()).URL
}
