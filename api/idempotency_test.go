package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailyard/mailyard/api"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
	"github.com/mailyard/mailyard/internal/testenv"
)

// secondServer is another API server on the same database through its own
// connection pool, as a second API process would be.
func (h *harness) secondServer(idempotencyWait time.Duration) string {
	h.t.Helper()
	st := testenv.OpenStore(h.t, h.dbURL)
	a := api.New(api.Deps{Config: h.cfg, Store: st, Temporal: h.temporal, Logger: h.logger, IdempotencyWait: idempotencyWait})
	srv := httptest.NewServer(a.Handler())
	h.t.Cleanup(srv.Close)
	return srv.URL
}

func idemKey(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }

const webhookBody = `{"url":"https://hooks.example.com/in","event_types":["delivered"]}`

// storedRows reads the idempotency table as raw bytes of every column.
func (h *harness) storedRows() [][]byte {
	h.t.Helper()
	var rows []store.IdempotencyKey
	if err := h.store.DB.NewSelect().Model(&rows).Scan(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	var out [][]byte
	for _, r := range rows {
		out = append(out, []byte(fmt.Sprintf("%d %s %x %s", r.OrganizationID, r.Key, r.Fingerprint, r.ResponseEnc)))
	}
	return out
}

func TestIdempotentCreateAcrossTwoServers(t *testing.T) {
	h := newHarness(t)
	bases := []string{h.srv.URL, h.secondServer(0)}

	type answer struct {
		status   int
		body     string
		replayed string
		err      error
	}
	const n = 50
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest("POST", bases[i%2]+"/api/v1/webhooks", strings.NewReader(webhookBody))
			req.Header.Set("Authorization", "Bearer "+h.adminKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "create-hook-1")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i].err = err
				return
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			answers[i] = answer{status: res.StatusCode, body: string(raw), replayed: res.Header.Get("Idempotent-Replayed")}
		}()
	}
	close(start)
	wg.Wait()

	// Every request gets the first answer: those that overlap it wait for it.
	first, replays := -1, 0
	for i, a := range answers {
		if a.err != nil || a.status != 201 {
			t.Fatalf("request %d: %d %s %v", i, a.status, a.body, a.err)
		}
		if a.body != answers[0].body {
			t.Fatalf("request %d answered %s, request 0 %s", i, a.body, answers[0].body)
		}
		if a.replayed == "true" {
			replays++
		} else {
			first = i
		}
	}
	if first < 0 || replays != n-1 {
		t.Fatalf("%d replays of %d answers", replays, n)
	}
	list := h.do("GET", "/api/v1/webhooks", h.adminKey, nil).data(t, 200)["webhooks"].([]any)
	if len(list) != 1 {
		t.Fatalf("%d webhooks created", len(list))
	}

	// A later repeat replays the same answer, secret included.
	again := h.doAt(bases[1], "POST", "/api/v1/webhooks", h.adminKey, webhookBody, idemKey("create-hook-1"))
	secret := again.data(t, 201)["signing_secret"].(string)
	if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Raw) != answers[0].body || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("replay %v %s", again.Header, again.Raw)
	}
	if again.Header.Get("RateLimit") == "" {
		t.Fatal("a replay lacks the rate-limit headers")
	}
	// The stored answer holds no secret in plain text.
	rows := h.storedRows()
	if len(rows) != 1 {
		t.Fatalf("%d stored keys", len(rows))
	}
	if bytes.Contains(rows[0], []byte(secret)) || bytes.Contains(rows[0], []byte("whsec_")) || bytes.Contains(rows[0], []byte("hooks.example.com")) {
		t.Fatalf("stored answer is readable: %s", rows[0])
	}

	// The same key with another body, or on another path, is refused.
	other := `{"url":"https://hooks.example.com/other","event_types":["delivered"]}`
	h.doAt(bases[0], "POST", "/api/v1/webhooks", h.adminKey, other, idemKey("create-hook-1")).expectError(t, 422, "idempotency_key_reused")
	h.doAt(bases[1], "POST", "/api/v1/domains", h.adminKey, `{"domain":"example.com"}`, idemKey("create-hook-1")).expectError(t, 422, "idempotency_key_reused")

	// Keys belong to an organization: another one's equal key is its own.
	_, otherKey := h.newOrg("other")
	r := h.doAt(bases[0], "POST", "/api/v1/webhooks", otherKey, webhookBody, idemKey("create-hook-1"))
	if r.data(t, 201); r.Header.Get("Idempotent-Replayed") != "" || string(r.Raw) == answers[0].body {
		t.Fatalf("another organization got a replay: %s", r.Raw)
	}
}

func TestIdempotentCreateCredentialKeepsItsSecret(t *testing.T) {
	h := newHarness(t)
	domainID := h.seedDomain(h.orgID, 1)
	body := fmt.Sprintf(`{"sending_domain_id":%d,"label":"prod","permissions":["send"]}`, domainID)
	first := h.doAt(h.srv.URL, "POST", "/api/v1/credentials", h.adminKey, body, idemKey("cred-1"))
	secret := first.data(t, 201)["secret_key"].(string)
	again := h.doAt(h.srv.URL, "POST", "/api/v1/credentials", h.adminKey, body, idemKey("cred-1"))
	if again.data(t, 201)["secret_key"] != secret || again.Header.Get("Idempotent-Replayed") != "true" || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("replay %s / %s", first.Raw, again.Raw)
	}
	if n := len(h.do("GET", "/api/v1/credentials", h.adminKey, nil).data(t, 200)["credentials"].([]any)); n != 2 {
		t.Fatalf("%d credentials, want the bootstrap key and one more", n)
	}
	for _, row := range h.storedRows() {
		if bytes.Contains(row, []byte(secret)) || bytes.Contains(row, []byte("myk_")) {
			t.Fatalf("stored answer holds the API key: %s", row)
		}
	}
	// The replayed key works.
	if r := h.do("GET", "/api/v1/domains", secret, nil); r.Status != 403 {
		t.Fatalf("replayed key: %d", r.Status)
	}
}

func TestIdempotencyKeyRules(t *testing.T) {
	h := newHarness(t)
	post := func(key, body string) response {
		return h.doAt(h.srv.URL, "POST", "/api/v1/webhooks", h.adminKey, body, idemKey(key))
	}
	for _, bad := range []string{strings.Repeat("k", 256), "clé", ""} {
		r := post(bad, webhookBody)
		r.expectError(t, 422, "validation_failed")
		if locs := r.detailLocations(); len(locs) == 0 || locs[0] != "header.Idempotency-Key" {
			t.Fatalf("%q: details at %v", bad, locs)
		}
	}
	post(strings.Repeat("k", 255), webhookBody).data(t, 201)
	post("with spaces and !~", webhookBody).data(t, 201)

	// A client error is kept and replayed: the same request would fail the same way.
	bad := `{"url":"http://hooks.example.com/in","event_types":["delivered"]}`
	post("bad-url", bad).expectError(t, 422, "validation_failed")
	if r := post("bad-url", bad); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("4xx not replayed: %v", r.Header)
	} else {
		r.expectError(t, 422, "validation_failed")
	}

	// GET ignores the header.
	for range 2 {
		if r := h.doAt(h.srv.URL, "GET", "/api/v1/webhooks", h.adminKey, nil, idemKey("get")); r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatal("GET replayed")
		}
	}

	// While another process answers the same request, a request waits for it
	// and, past the wait, answers 409.
	ctx := context.Background()
	slow := h.secondServer(300 * time.Millisecond)
	admin, err := h.store.ActiveAPIKeyByDigest(ctx, keys.Digest(h.adminKey))
	if err != nil {
		t.Fatal(err)
	}
	fp := api.RequestFingerprint(admin.ID, "POST", "/api/v1/webhooks", []byte(webhookBody))
	if _, row, err := h.store.ClaimIdempotencyKey(ctx, h.orgID, "busy", fp, time.Minute, 24*time.Hour); err != nil || row != nil {
		t.Fatalf("claim: %v %v", row, err)
	}
	began := time.Now()
	h.doAt(slow, "POST", "/api/v1/webhooks", h.adminKey, webhookBody, idemKey("busy")).expectError(t, 409, "idempotency_in_progress")
	if waited := time.Since(began); waited < 250*time.Millisecond {
		t.Fatalf("answered 409 after %v without waiting", waited)
	}
	// Another request is still refused while the key is claimed.
	h.doAt(slow, "POST", "/api/v1/webhooks", h.adminKey, `{}`, idemKey("busy")).expectError(t, 422, "idempotency_key_reused")
	// A claim whose process died is taken over once its lock runs out.
	if _, err := h.store.DB.NewUpdate().Model((*store.IdempotencyKey)(nil)).Set("locked_until = ?", time.Now().UTC().Add(-time.Second)).
		Where("idempotency_key = ?", "busy").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	taken := h.doAt(slow, "POST", "/api/v1/webhooks", h.adminKey, webhookBody, idemKey("busy"))
	if taken.data(t, 201); taken.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a dead claim was replayed")
	}

	// After 24 hours a key is free again.
	if _, err := h.store.DB.NewUpdate().Model((*store.IdempotencyKey)(nil)).Set("expires_at = ?", time.Now().UTC().Add(-time.Second)).
		Where("idempotency_key = ?", "busy").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	other := `{"url":"https://hooks.example.com/b","event_types":["bounced"]}`
	if r := h.doAt(slow, "POST", "/api/v1/webhooks", h.adminKey, other, idemKey("busy")); r.data(t, 201)["webhook"].(map[string]any)["url"] != "https://hooks.example.com/b" {
		t.Fatalf("expired key: %s", r.Raw)
	}
}

// An Idempotency-Key works on a body of any size the operation accepts:
// Send email takes up to 10 MiB, far over the 64 KiB of other routes, and
// the key must neither cut such a body nor let one over the limit through.
// An Idempotency-Key is the organization's, its answer the API key's: the
// same request with the same key from another API key of the organization
// (here one scoped to another domain, which may not see the first one's
// email) is refused, never replayed the first answer.
func TestIdempotentAnswerIsNotReplayedToAnotherKey(t *testing.T) {
	h := newHarness(t)
	shop := h.domainInStatus(h.orgID, "shop.example", store.DomainVerified)
	news := h.domainInStatus(h.orgID, "news.example", store.DomainVerified)
	_, shopKey := h.issueCredential(h.adminKey, shop, "shop", "send")
	_, newsKey := h.issueCredential(h.adminKey, news, "news", "send")
	body := map[string]any{"from": "hello@shop.example", "to": "ada@example.org", "subject": "Private", "text": "hello"}
	first := h.doAt(h.srv.URL, "POST", "/api/v1/emails", shopKey, body, idemKey("order-42"))
	first.data(t, 202)
	again := h.doAt(h.srv.URL, "POST", "/api/v1/emails", newsKey, body, idemKey("order-42"))
	again.expectError(t, 422, "idempotency_key_reused")
	if again.Header.Get("Idempotent-Replayed") != "" || strings.Contains(string(again.Raw), "Private") {
		t.Fatalf("another key got the first answer: %s", again.Raw)
	}
	if r := h.doAt(h.srv.URL, "POST", "/api/v1/emails", shopKey, body, idemKey("order-42")); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same key's retry: %d %v", r.Status, r.Header)
	}
}

func TestIdempotentSendOfALargeEmail(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "large.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")
	send := func(text string) response {
		body := map[string]any{"from": "news@large.example", "to": []string{"a@example.org"}, "subject": "hi", "text": text}
		return h.doAt(h.srv.URL, "POST", "/api/v1/emails", sendKey, body, idemKey("large-1"))
	}

	text := strings.Repeat("A line of a long newsletter.\r\n", 10000) // 300 KB
	first := send(text)
	if first.Status != 202 {
		t.Fatalf("send of %d bytes: %d %s", len(text), first.Status, first.Raw)
	}
	again := send(text)
	if again.Status != 202 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Raw) != string(first.Raw) {
		t.Fatalf("retry: %d replayed=%q %s, want the first answer", again.Status, again.Header.Get("Idempotent-Replayed"), again.Raw)
	}
	// The same key with another large body is another request.
	send(text+"P.S.").expectError(t, 422, "idempotency_key_reused")
	// Over the operation's limit: 413, whatever the key.
	send(strings.Repeat("x", 10<<20)).expectError(t, 413, "payload_too_large")
}
