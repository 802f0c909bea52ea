package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailyard/mailyard/internal/testenv"
)

// callRaw sends a request with key and returns the status and the envelope.
func (s *stack) callRaw(key, method, path string, body any) (int, map[string]any) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, s.apiURL+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		s.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
	}
	return res.StatusCode, env
}

// Scheduled and batch sending through the real processes, in real time: an
// email scheduled 3 s ahead is scheduled, then delivered after its time; a
// rescheduled one moves; a canceled one sends nothing; a second cancel and a
// reschedule after sending are 409 email_not_scheduled; a batch of 100 is
// stored at once and all delivered, and an invalid batch sends nothing.
func TestScheduledAndBatchSending(t *testing.T) {
	mx := startMX(t)
	s := startStack(t, append(mx.env(), "MAILYARD_VERIFY_SCHEDULE=1s/60s", "MAILYARD_RATE_LIMIT=off")...)
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	domainID, _, _ := verifiedDomain(t, s, "shop.example")
	key := s.call("POST", "/api/v1/credentials", map[string]any{"sending_domain_id": domainID, "label": "app", "permissions": []string{"send"}}, 201)["secret_key"].(string)
	body := func(to, at string) map[string]any {
		b := map[string]any{"from": "billing@shop.example", "to": to, "subject": "Scheduled", "text": "Hello."}
		if at != "" {
			b["scheduled_at"] = at
		}
		return b
	}
	get := func(id string) map[string]any {
		return s.callAs(key, "GET", "/api/v1/emails/"+id, nil, 200)["email"].(map[string]any)
	}

	sendAt := time.Now().Add(3 * time.Second)
	on := s.callAs(key, "POST", "/api/v1/emails", body("on-time@rcpt.example", sendAt.Format(time.RFC3339Nano)), 202)["email"].(map[string]any)
	if on["status"] != "scheduled" || on["scheduled_at"] == nil {
		t.Fatalf("scheduled answer %v", on)
	}
	moved := s.callAs(key, "POST", "/api/v1/emails", body("moved@rcpt.example", time.Now().Add(time.Hour).Format(time.RFC3339)), 202)["email"].(map[string]any)["id"].(string)
	canceled := s.callAs(key, "POST", "/api/v1/emails", body("canceled@rcpt.example", time.Now().Add(2*time.Second).Format(time.RFC3339Nano)), 202)["email"].(map[string]any)["id"].(string)

	if got := s.callAs(key, "POST", "/api/v1/emails/"+canceled+"/cancel", nil, 200)["email"].(map[string]any); got["status"] != "canceled" {
		t.Fatalf("canceled %v", got)
	}
	s.callAs(key, "PATCH", "/api/v1/emails/"+moved, map[string]any{"scheduled_at": time.Now().Add(2 * time.Second).Format(time.RFC3339Nano)}, 200)
	if get(on["id"].(string))["status"] != "scheduled" {
		t.Fatal("the scheduled email is not scheduled before its time")
	}
	if len(mx.received("on-time@rcpt.example")) != 0 {
		t.Fatal("a scheduled email was sent before its time")
	}
	for _, id := range []string{on["id"].(string), moved} {
		testenv.Eventually(t, 30*time.Second, "scheduled email sent", func() bool { return get(id)["status"] == "sent" })
	}
	if len(mx.received("on-time@rcpt.example")) != 1 || time.Now().Before(sendAt) {
		t.Fatal("the scheduled email did not arrive after its time")
	}
	if len(mx.received("moved@rcpt.example")) != 1 {
		t.Fatal("the rescheduled email did not arrive")
	}
	time.Sleep(time.Second)
	if len(mx.received("canceled@rcpt.example")) != 0 || get(canceled)["status"] != "canceled" {
		t.Fatal("a canceled email was sent")
	}
	for _, call := range []struct{ method, path string }{{"POST", "/api/v1/emails/" + canceled + "/cancel"}, {"PATCH", "/api/v1/emails/" + moved}} {
		if code, env := s.callRaw(key, call.method, call.path, map[string]any{"scheduled_at": time.Now().Add(time.Hour).Format(time.RFC3339)}); code != 409 ||
			env["error"].(map[string]any)["code"] != "email_not_scheduled" {
			t.Fatalf("%s %s: %d %v", call.method, call.path, code, env)
		}
	}
	// Validation of scheduled_at.
	for at, want := range map[string]string{
		"2026-12-01T09:00:00": "time-zone offset",
		time.Now().Add(31 * 24 * time.Hour).Format(time.RFC3339): "30 days",
		time.Now().Add(-10 * time.Minute).Format(time.RFC3339):   "in the past",
	} {
		code, env := s.callRaw(key, "POST", "/api/v1/emails", body("x@rcpt.example", at))
		d := fmt.Sprint(env["error"])
		if code != 422 || !strings.Contains(d, "body.scheduled_at") || !strings.Contains(d, want) {
			t.Fatalf("scheduled_at %q: %d %v", at, code, env)
		}
	}

	// A batch with one invalid item sends nothing; 101 items are refused.
	items := make([]map[string]any, 100)
	for i := range items {
		items[i] = body(fmt.Sprintf("batch%d@rcpt.example", i), "")
	}
	bad := slices.Clone(items[:5])
	bad[3] = map[string]any{"from": "billing@shop.example", "to": "not an address", "subject": "x", "text": "x"}
	code, env := s.callRaw(key, "POST", "/api/v1/emails/batch", bad)
	if code != 422 || !strings.Contains(fmt.Sprint(env["error"]), "body[3].to") {
		t.Fatalf("invalid batch: %d %v", code, env)
	}
	if code, _ := s.callRaw(key, "POST", "/api/v1/emails/batch", append(slices.Clone(items), items[0])); code != 422 {
		t.Fatalf("101 items: %d", code)
	}
	before := len(s.callAs(key, "GET", "/api/v1/emails?limit=100", nil, 200)["emails"].([]any))
	if before != 3 {
		t.Fatalf("%d emails after invalid batches, want the 3 scheduled ones", before)
	}
	// The answer comes once every workflow of the batch has started.
	began := time.Now()
	queued := s.callAs(key, "POST", "/api/v1/emails/batch", items, 202)["emails"].([]any)
	t.Logf("a batch of 100: stored and every workflow started in %s", time.Since(began).Round(time.Millisecond))
	if len(queued) != 100 {
		t.Fatalf("%d emails queued", len(queued))
	}
	for i, q := range queued {
		id := q.(map[string]any)["id"].(string)
		e := get(id)
		if e["to"].([]any)[0] != fmt.Sprintf("batch%d@rcpt.example", i) || e["source"] != "batch" {
			t.Fatalf("item %d is %v", i, e)
		}
	}
	// With an Idempotency-Key, a batch is one request: the same again gets
	// the same ids, and stores nothing more.
	first, err := postWithKey(s.apiURL, key, "/api/v1/emails/batch", "batch-key-1", items[:3])
	if err != nil || first.status != 202 {
		t.Fatalf("keyed batch: %v %+v", err, first)
	}
	again, err := postWithKey(s.apiURL, key, "/api/v1/emails/batch", "batch-key-1", items[:3])
	if err != nil || again.status != 202 || !again.replayed || !bytes.Equal(again.body, first.body) {
		t.Fatalf("the same keyed batch again: %v %+v, first %s", err, again, first.body)
	}
	n, cursor := 0, ""
	for {
		page := s.callAs(key, "GET", "/api/v1/emails?limit=100"+cursor, nil, 200)
		n += len(page["emails"].([]any))
		next, _ := page["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = "&cursor=" + next
	}
	if n != 3+100+3 {
		t.Fatalf("%d emails after a keyed batch sent twice, want %d", n, 3+100+3)
	}
	testenv.Eventually(t, 2*time.Minute, "the batch delivered", func() bool {
		for i := range items {
			want := 1
			if i < 3 {
				want = 2 // also in the keyed batch
			}
			if len(mx.received(fmt.Sprintf("batch%d@rcpt.example", i))) != want {
				return false
			}
		}
		return true
	})
}
