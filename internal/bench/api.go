package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun/driver/pgdriver"
	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
)

const (
	apiClients  = 32
	apiDomains  = 50
	apiDuration = 8 * time.Second
)

// benchAPI measures authenticated GET /api/v1/domains (an organization with 50
// domains, 32 concurrent clients) on PostgreSQL, beside a bare net/http handler
// that runs the same two queries (key by digest, domains of the organization) and
// writes the same JSON.
func benchAPI(ctx context.Context) error {
	st, done, err := benchStore(ctx)
	if err != nil {
		return err
	}
	defer done()
	secret, _ := keys.NewAPIKey()
	org, err := st.CreateOrganizationWithKey(ctx, "bench", keyauth.WithSecret(secret, &store.APIKey{
		Label: "bench", Username: "bench", Permissions: store.Permissions{"admin"}}))
	if err != nil {
		return err
	}
	for i := 0; i < apiDomains; i++ {
		d := &store.Domain{OrganizationID: org.ID, Domain: fmt.Sprintf("d%02d.example.com", i), MailFromSubdomain: fmt.Sprintf("mail.d%02d.example.com", i), DKIMToken: uuid.NewString()}
		if err := st.CreateDomain(ctx, d, nil); err != nil {
			return err
		}
	}

	// Benchmarks measure throughput, not the per-key rate limit.
	cfg, err := config.LoadFrom(func(name string) string { return map[string]string{"MAILYARD_RATE_LIMIT": "off"}[name] }, config.Need{})
	if err != nil {
		return err
	}
	// The list operation never talks to Temporal; a lazy client never dials.
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		return err
	}
	defer tc.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srvCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := api.New(api.Deps{Config: cfg, Store: st, Temporal: tc, Logger: logger})
	go a.Run(srvCtx)
	mailyard := httptest.NewServer(a.Handler())
	defer mailyard.Close()
	bare := httptest.NewServer(bareListDomains(st))
	defer bare.Close()

	request := func(base string) func() *http.Request {
		return func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/domains", nil)
			req.Header.Set("Authorization", "Bearer "+secret)
			return req
		}
	}
	// Warm both, then alternate so drift on the machine hits both alike.
	closedLoop(ctx, apiClients, time.Second, request(bare.URL))
	closedLoop(ctx, apiClients, time.Second, request(mailyard.URL))
	var bareRuns, myRuns []loadResult
	for i := 0; i < 2; i++ {
		bareRuns = append(bareRuns, closedLoop(ctx, apiClients, apiDuration, request(bare.URL)))
		myRuns = append(myRuns, closedLoop(ctx, apiClients, apiDuration, request(mailyard.URL)))
	}
	b, m := merge(bareRuns), merge(myRuns)
	fmt.Printf("\nGET /api/v1/domains, %d domains, %d clients, PostgreSQL, %d x %s each\n", apiDomains, apiClients, len(myRuns), apiDuration)
	fmt.Printf("  bare net/http   %s\n", b)
	fmt.Printf("  mailyard API    %s\n", m)
	fmt.Printf("  mailyard / bare throughput: %.0f %%\n", 100*m.RPS()/b.RPS())
	return nil
}

// merge adds runs up; percentiles are the worse of the runs (conservative).
func merge(runs []loadResult) loadResult {
	var out loadResult
	for _, r := range runs {
		out.Requests += r.Requests
		out.Errors += r.Errors
		out.Elapsed += r.Elapsed
		out.P50 = max(out.P50, r.P50)
		out.P99 = max(out.P99, r.P99)
	}
	return out
}

// bareListDomains is the baseline: authentication and listing with the same store
// queries, without Huma, middleware or envelopes beyond the JSON itself.
func bareListDomains(st *store.Store) http.Handler {
	type domain struct {
		ID                int64     `json:"id"`
		Domain            string    `json:"domain"`
		MailFromSubdomain string    `json:"mailfrom_subdomain"`
		Status            string    `json:"status"`
		CreatedAt         time.Time `json:"created_at"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		key, err := st.ActiveAPIKeyByDigest(r.Context(), keys.Digest(secret))
		if err != nil {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		rows, _, err := st.ListDomains(r.Context(), key.OrganizationID, store.Page{})
		if err != nil {
			http.Error(w, "error", http.StatusInternalServerError)
			return
		}
		out := make([]domain, len(rows))
		for i, d := range rows {
			out[i] = domain{d.ID, d.Domain, d.MailFromSubdomain, d.Status, d.CreatedAt}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"domains": out}})
	})
}

// benchStore opens a migrated store on a throwaway database; done closes and
// drops it.
func benchStore(ctx context.Context) (*store.Store, func(), error) {
	st, _, done, err := benchStoreAt(ctx)
	return st, done, err
}

// benchStoreAt is benchStore that also returns the database's URL (for a
// process of its own).
func benchStoreAt(ctx context.Context) (*store.Store, string, func(), error) {
	dbURL, drop, err := throwawayDatabase(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	done := func() { _ = st.Close(); drop() }
	if _, err := st.Migrate(ctx); err != nil {
		done()
		return nil, "", nil, err
	}
	return st, dbURL, done, nil
}

// throwawayDatabase creates a database for the run on MAILYARD_TEST_DATABASE_URL's
// server (default: the local one) and returns its URL and a function to drop it.
func throwawayDatabase(ctx context.Context) (string, func(), error) {
	admin := os.Getenv("MAILYARD_TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(admin)))
	name := "mailyard_bench_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("PostgreSQL at %s: %w", admin, err)
	}
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	return u.String(), func() {
		_, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		db.Close()
	}, nil
}
