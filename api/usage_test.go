package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// queryLog is a Bun query hook that remembers every statement sent to the database.
type queryLog struct {
	mu      sync.Mutex
	queries []string
}

var _ bun.QueryHook = (*queryLog)(nil)

func (l *queryLog) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

func (l *queryLog) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queries = append(l.queries, e.Query)
}

// count returns how many statements so far contain every one of the fragments.
func (l *queryLog) count(fragments ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, q := range l.queries {
		for _, f := range fragments {
			if !strings.Contains(q, f) {
				continue next
			}
		}
		n++
	}
	return n
}

// lastUsedWrites are the statements that record a key's use.
func (l *queryLog) lastUsedWrites() int { return l.count("UPDATE", "api_keys", "last_used_at") }

// observedAPI is a harness whose store logs its queries. The hook is installed
// before any server uses the store, so the log sees every statement. Several API
// servers can share the store, like several API processes share one database.
type observedAPI struct {
	*harness
	queries *queryLog
}

func newObservedAPI(t *testing.T) *observedAPI {
	t.Helper()
	h := newHarness(t) // for its configuration and Temporal client

	st := testenv.OpenStore(t, testenv.PostgresURL(t))
	log := &queryLog{}
	st.DB = st.DB.WithQueryHook(log)
	o := &observedAPI{harness: &harness{t: t, store: st, cfg: h.cfg, temporal: h.temporal}, queries: log}
	o.srv, o.api = o.startServer()
	o.orgID, o.adminKey = o.newOrg("acme")
	return o
}

// startServer runs one more API server over the observed store.
func (o *observedAPI) startServer() (*httptest.Server, *api.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	o.t.Cleanup(cancel)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := api.New(api.Deps{Config: o.cfg, Store: o.store, Temporal: o.temporal, Logger: logger})
	go a.Run(ctx)
	srv := httptest.NewServer(a.Handler())
	o.t.Cleanup(srv.Close)
	return srv, a
}

// statusOf sends a GET to one server with a key and returns the status.
func statusOf(t *testing.T, client *http.Client, url, key string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// 1,000 requests with one key, spread over two API servers on one database, cause
// at most 2 writes of last_used_at: each server writes at most once a minute per
// key, and the conditional UPDATE turns the later one into a no-op.
func TestLastUsedAtWrittenAtMostOncePerMinute(t *testing.T) {
	o := newObservedAPI(t)
	second, _ := o.startServer()
	ctx := context.Background()

	boot := new(store.APIKey)
	if err := o.store.DB.NewSelect().Model(boot).Where("organization_id = ?", o.orgID).Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if boot.LastUsedAt != nil {
		t.Fatalf("unused key has last_used_at %v", boot.LastUsedAt)
	}

	started := time.Now()
	client := &http.Client{}
	for i := 0; i < 1000; i++ {
		url := o.srv.URL
		if i%2 == 1 {
			url = second.URL
		}
		if status := statusOf(t, client, url+"/api/v1/credentials", o.adminKey); status != 200 {
			t.Fatalf("request %d answered %d", i, status)
		}
	}
	if elapsed := time.Since(started); elapsed > 50*time.Second {
		t.Skipf("1,000 requests took %s; the minute the test is about is over", elapsed)
	}
	testenv.Eventually(t, 10*time.Second, "last_used_at to be recorded", func() bool {
		return o.queries.lastUsedWrites() >= 1
	})
	// Give a straggling write from the second server time to show up.
	time.Sleep(300 * time.Millisecond)
	n := o.queries.lastUsedWrites()
	if n > 2 {
		t.Fatalf("%d writes of last_used_at for 1,000 requests within a minute, want at most 2", n)
	}
	t.Logf("1,000 requests over two servers in %s: %d writes of last_used_at", time.Since(started).Round(time.Millisecond), n)

	list := o.do("GET", "/api/v1/credentials", o.adminKey, nil).data(t, 200)["credentials"].([]any)
	used, _ := list[0].(map[string]any)["last_used_at"].(string)
	at, err := time.Parse(time.RFC3339, used)
	if err != nil || !strings.HasSuffix(used, "Z") || at.Before(started.Add(-time.Second)) {
		t.Fatalf("last_used_at %q after use (%v)", used, err)
	}
}

// Recording a use happens off the request path: while the key's row is locked
// (the UPDATE waits) and when the UPDATE fails outright, requests still succeed.
func TestRecordingUseNeverHoldsUpOrFailsRequests(t *testing.T) {
	o := newObservedAPI(t)
	ctx := context.Background()
	client := &http.Client{Timeout: 20 * time.Second}

	// A transaction holds the key's row lock: the recorder's UPDATE blocks on it.
	tx, err := o.store.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT id FROM api_keys WHERE organization_id = ? FOR UPDATE", o.orgID); err != nil {
		t.Fatal(err)
	}
	if status := statusOf(t, client, o.srv.URL+"/api/v1/credentials", o.adminKey); status != 200 {
		t.Fatalf("first request answered %d", status)
	}
	testenv.Eventually(t, 10*time.Second, "the usage write to wait for the row lock", func() bool {
		var waiting int
		err := o.store.DB.NewRaw(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE "api_keys"%'`).Scan(ctx, &waiting)
		return err == nil && waiting == 1
	})
	for i := 0; i < 20; i++ {
		if status := statusOf(t, client, o.srv.URL+"/api/v1/credentials", o.adminKey); status != 200 {
			t.Fatalf("request %d answered %d while the usage write waits", i, status)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the waiting usage write to finish", func() bool {
		return o.queries.lastUsedWrites() == 1
	})

	// Now every write of last_used_at fails: requests with a fresh key still succeed.
	if _, err := o.store.DB.ExecContext(ctx, `
		CREATE FUNCTION refuse_last_used() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'last_used_at writes refused'; END $$;
		CREATE TRIGGER refuse_last_used BEFORE UPDATE OF last_used_at ON api_keys
		FOR EACH ROW EXECUTE FUNCTION refuse_last_used();`); err != nil {
		t.Fatal(err)
	}
	_, fresh := o.newOrg("fresh")
	before := o.queries.lastUsedWrites()
	for i := 0; i < 20; i++ {
		if status := statusOf(t, client, o.srv.URL+"/api/v1/credentials", fresh); status != 200 {
			t.Fatalf("request %d answered %d while usage writes fail", i, status)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the failing usage write", func() bool {
		return o.queries.lastUsedWrites() > before
	})
	if status := statusOf(t, client, o.srv.URL+"/api/v1/credentials", fresh); status != 200 {
		t.Fatalf("request after a failed usage write answered %d", status)
	}
}

// A mistyped key fails its checksum before the database is asked: each
// single-character substitution gets 401, and not one statement reaches the store.
func TestMutatedKeyRefusedWithoutDatabaseLookUp(t *testing.T) {
	o := newObservedAPI(t)
	client := &http.Client{}
	key := o.adminKey
	before := o.queries.count("")
	for i := 0; i < len(key); i++ {
		c := byte('A')
		if key[i] == c {
			c = 'B'
		}
		mutated := key[:i] + string(c) + key[i+1:]
		if status := statusOf(t, client, o.srv.URL+"/api/v1/credentials", mutated); status != 401 {
			t.Fatalf("key mutated at %d answered %d", i, status)
		}
	}
	if n := o.queries.count("") - before; n != 0 {
		t.Fatalf("mutated keys caused %d database statements, want none", n)
	}
	// The control: the intact key does reach the database.
	if status := statusOf(t, client, o.srv.URL+"/api/v1/credentials", key); status != 200 || o.queries.count("") == before {
		t.Fatalf("intact key answered %d after %d statements", status, o.queries.count("")-before)
	}
	if keys.CheckAPIKey(key) != nil {
		t.Fatal("the control key is malformed")
	}
}
