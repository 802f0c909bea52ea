package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// apiClient is the one client of the public API the end-to-end tests use: each
// method is one call, with the status it must answer, and returns the
// envelope's data decoded into the types below. The types name the fields the
// tests read, and decoding fails the test when the answer lacks one of them
// (fields tagged omitempty may be absent), as a lookup in the decoded map did.
type apiClient struct {
	t   testing.TB
	url string // the API process's public listener
	key string // the API key sent as a bearer token
}

// api is the stack's client with the organization's admin key, talking to
// the first api process (or the one s.on chose).
func (s *stack) api() *apiClient {
	return &apiClient{t: s.t, url: s.apiURL, key: s.adminKey}
}

// clientAt is a client of the API process at url with key.
func clientAt(t testing.TB, url, key string) *apiClient {
	return &apiClient{t: t, url: url, key: key}
}

// internalAPI is a client of an api process's internal listener (host:port),
// with the stacks' internal token.
func internalAPI(t testing.TB, addr string) *apiClient {
	return &apiClient{t: t, url: "http://" + addr, key: "e2e-internal-token"}
}

// ingestRequest is the internal API's request to ingest one platform event
// (its JSON, eventBody's).
func (c *apiClient) ingestRequest(event []byte) *http.Request {
	return c.request("POST", "/internal/v1/events", json.RawMessage(event))
}

// as is the client with another API key.
func (c *apiClient) as(key string) *apiClient {
	d := *c
	d.key = key
	return &d
}

// The answers' data.
type (
	Domain struct {
		ID                int64  `json:"id"`
		Domain            string `json:"domain"`
		Status            string `json:"status"`
		MailFromSubdomain string `json:"mailfrom_subdomain"`
	}
	// DeletedDomain is what DELETE answers: no more than this.
	DeletedDomain struct {
		ID     int64  `json:"id"`
		Domain string `json:"domain"`
		Status string `json:"status"`
	}
	DNSRecord struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	AddedDomain struct {
		Domain     Domain      `json:"domain"`
		DNSRecords []DNSRecord `json:"dns_records"`
	}
	CheckedRecord struct {
		Name      string     `json:"name"`
		Status    string     `json:"status"`
		Observed  []string   `json:"observed"`
		CheckedAt *time.Time `json:"checked_at"`
	}
	// DomainRecords answers GET …/dns-records and POST …/verify.
	DomainRecords struct {
		Domain     Domain          `json:"domain"`
		DNSRecords []CheckedRecord `json:"dns_records"`
	}
	DomainDetail struct {
		ID         int64      `json:"id"`
		Domain     string     `json:"domain"`
		Status     string     `json:"status"`
		VerifiedAt *time.Time `json:"verified_at"`
		DKIM       DKIMState  `json:"dkim"`
	}
	DKIMState struct {
		ActiveSelector string       `json:"active_selector"` // "" for null
		Rotation       DKIMRotation `json:"rotation"`
		Keys           []DKIMKey    `json:"keys"`
	}
	DKIMRotation struct {
		Enabled        bool       `json:"enabled"`
		IntervalDays   int        `json:"interval_days"`
		LastRotatedAt  *time.Time `json:"last_rotated_at"`
		NextRotationAt *time.Time `json:"next_rotation_at"`
		InProgress     bool       `json:"in_progress"`
	}
	DKIMKey struct {
		Selector  string     `json:"selector"`
		State     string     `json:"state"`
		Bits      int        `json:"bits"`
		CreatedAt *time.Time `json:"created_at"`
	}
	RotationStarted struct {
		ActiveSelector string `json:"active_selector"`
		NextSelector   string `json:"next_selector"`
	}
	NewCredential struct {
		Credential struct {
			ID       int64  `json:"id"`
			Username string `json:"username"`
		} `json:"credential"`
		SecretKey string `json:"secret_key"`
	}
	Webhook struct {
		ID         int64    `json:"id"`
		URL        string   `json:"url"`
		EventTypes []string `json:"event_types"`
		Status     string   `json:"status"`
	}
	NewWebhook struct {
		Webhook       Webhook `json:"webhook"`
		SigningSecret string  `json:"signing_secret"`
	}
	Delivery struct {
		ID        string    `json:"id"`
		EventType string    `json:"event_type"`
		Status    string    `json:"status"`
		Attempts  []Attempt `json:"attempts"`
	}
	Attempt struct {
		AttemptedAt  time.Time `json:"attempted_at"`
		StatusCode   *int      `json:"status_code"`
		Error        *string   `json:"error"`
		DurationMS   int64     `json:"duration_ms"`
		ResponseBody string    `json:"response_body"`
	}
	QueuedEmail struct {
		ID          string     `json:"id"`
		Status      string     `json:"status"`
		ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	}
	Email struct {
		ID              string      `json:"id"`
		From            string      `json:"from"`
		To              []string    `json:"to"`
		Cc              []string    `json:"cc"`
		Subject         string      `json:"subject"`
		Status          string      `json:"status"`
		ScheduledAt     *time.Time  `json:"scheduled_at,omitempty"`
		Source          string      `json:"source"`
		MessageIDHeader *string     `json:"message_id_header,omitempty"`
		Recipients      []Recipient `json:"recipients"`
	}
	// EmailEvent's data is the event's own, free-form in the API too.
	EmailEvent struct {
		EventType string         `json:"event_type"`
		ToEmail   string         `json:"to_email"`
		Data      map[string]any `json:"data"`
	}
	EmailPage struct {
		Emails     []Email `json:"emails"`
		NextCursor string  `json:"next_cursor,omitempty"` // "" for null
	}
	Recipient struct {
		Email        string  `json:"email"`
		Status       string  `json:"status"`
		Attempts     int     `json:"attempts"`
		LastResponse *string `json:"last_response"`
	}
	Suppression struct {
		Email  string `json:"email"`
		Reason string `json:"reason"`
	}
	StatTotals struct {
		Accepted   int64 `json:"accepted"`
		Delivered  int64 `json:"delivered"`
		Deferred   int64 `json:"deferred"`
		Bounced    int64 `json:"bounced"`
		Complained int64 `json:"complained"`
	}
)

// Domains.

func (c *apiClient) addDomain(name, mailFrom string) AddedDomain {
	c.t.Helper()
	body := map[string]any{"domain": name}
	if mailFrom != "" {
		body["mailfrom_subdomain"] = mailFrom
	}
	var out AddedDomain
	c.do("POST", "/api/v1/domains", body, 201, &out)
	return out
}

func (c *apiClient) domains() []Domain {
	c.t.Helper()
	var out struct {
		Domains []Domain `json:"domains"`
	}
	c.do("GET", "/api/v1/domains", nil, 200, &out)
	return out.Domains
}

func (c *apiClient) domain(id int64) DomainDetail {
	c.t.Helper()
	var out struct {
		Domain DomainDetail `json:"domain"`
	}
	c.do("GET", fmt.Sprintf("/api/v1/domains/%d", id), nil, 200, &out)
	return out.Domain
}

func (c *apiClient) dnsRecords(id int64) DomainRecords {
	c.t.Helper()
	var out DomainRecords
	c.do("GET", fmt.Sprintf("/api/v1/domains/%d/dns-records", id), nil, 200, &out)
	return out
}

func (c *apiClient) verify(id int64) DomainRecords {
	c.t.Helper()
	var out DomainRecords
	c.do("POST", fmt.Sprintf("/api/v1/domains/%d/verify", id), nil, 200, &out)
	return out
}

func (c *apiClient) rotate(id int64) RotationStarted {
	c.t.Helper()
	var out struct {
		Rotation RotationStarted `json:"rotation"`
	}
	c.do("POST", fmt.Sprintf("/api/v1/domains/%d/dkim/rotate", id), nil, 202, &out)
	return out.Rotation
}

func (c *apiClient) deleteDomain(id int64) DeletedDomain {
	c.t.Helper()
	var out struct {
		Domain DeletedDomain `json:"domain"`
	}
	c.do("DELETE", fmt.Sprintf("/api/v1/domains/%d", id), nil, 200, &out)
	return out.Domain
}

// Credentials.

func (c *apiClient) createCredential(domainID int64, label string, permissions ...string) NewCredential {
	c.t.Helper()
	var out NewCredential
	c.do("POST", "/api/v1/credentials", map[string]any{"sending_domain_id": domainID, "label": label, "permissions": permissions}, 201, &out)
	return out
}

// sendKey creates a credential with the send permission and returns its key.
func (c *apiClient) sendKey(domainID int64) string {
	c.t.Helper()
	return c.createCredential(domainID, "app", "send").SecretKey
}

func (c *apiClient) revokeCredential(id int64) {
	c.t.Helper()
	c.do("DELETE", fmt.Sprintf("/api/v1/credentials/%d", id), nil, 200, nil)
}

// Webhooks.

func (c *apiClient) createWebhook(url string, eventTypes ...string) NewWebhook {
	c.t.Helper()
	var out NewWebhook
	c.do("POST", "/api/v1/webhooks", map[string]any{"url": url, "event_types": eventTypes}, 201, &out)
	return out
}

func (c *apiClient) webhook(id int64) Webhook {
	c.t.Helper()
	var out struct {
		Webhook Webhook `json:"webhook"`
	}
	c.do("GET", fmt.Sprintf("/api/v1/webhooks/%d", id), nil, 200, &out)
	return out.Webhook
}

func (c *apiClient) webhooks() []Webhook {
	c.t.Helper()
	var out struct {
		Webhooks []Webhook `json:"webhooks"`
	}
	c.do("GET", "/api/v1/webhooks?limit=100", nil, 200, &out)
	return out.Webhooks
}

func (c *apiClient) deliveries(webhookID int64) []Delivery {
	c.t.Helper()
	var out struct {
		Deliveries []Delivery `json:"deliveries"`
	}
	c.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/deliveries?limit=100", webhookID), nil, 200, &out)
	return out.Deliveries
}

// Emails.

// send queues an email (POST /api/v1/emails answers 202).
func (c *apiClient) send(body any) QueuedEmail {
	c.t.Helper()
	var out struct {
		Email QueuedEmail `json:"email"`
	}
	c.do("POST", "/api/v1/emails", body, 202, &out)
	return out.Email
}

func (c *apiClient) email(id string) Email {
	c.t.Helper()
	var out struct {
		Email Email `json:"email"`
	}
	c.do("GET", "/api/v1/emails/"+id, nil, 200, &out)
	return out.Email
}

// emails lists emails; query is "" or the URL's query ("?limit=100").
func (c *apiClient) emails(query string) EmailPage {
	c.t.Helper()
	var out EmailPage
	c.do("GET", "/api/v1/emails"+query, nil, 200, &out)
	return out
}

// sendBatch queues a batch (POST /api/v1/emails/batch answers 202).
func (c *apiClient) sendBatch(items any) []QueuedEmail {
	c.t.Helper()
	var out struct {
		Emails []QueuedEmail `json:"emails"`
	}
	c.do("POST", "/api/v1/emails/batch", items, 202, &out)
	return out.Emails
}

// cancelEmail cancels a scheduled email and returns the status it answers.
func (c *apiClient) cancelEmail(id string) string {
	c.t.Helper()
	var out struct {
		Email struct {
			Status string `json:"status"`
		} `json:"email"`
	}
	c.do("POST", "/api/v1/emails/"+id+"/cancel", nil, 200, &out)
	return out.Email.Status
}

// reschedule moves a scheduled email to at (RFC 3339).
func (c *apiClient) reschedule(id, at string) {
	c.t.Helper()
	c.do("PATCH", "/api/v1/emails/"+id, map[string]any{"scheduled_at": at}, 200, nil)
}

// refused sends a request that the API must refuse, and returns its status,
// its error code and the whole error object as JSON (for the messages).
func (c *apiClient) refused(method, path string, body any) (status int, code, errorJSON string) {
	c.t.Helper()
	status, raw, err := c.send1(method, path, body, nil)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	var e struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(raw, &env) != nil || json.Unmarshal(env.Error, &e) != nil {
		c.t.Fatalf("%s %s: %d, not an error: %s", method, path, status, raw)
	}
	return status, e.Code, string(env.Error)
}

// emailEvents lists an email's events, oldest first.
func (c *apiClient) emailEvents(id string) []EmailEvent {
	c.t.Helper()
	var out struct {
		Events []EmailEvent `json:"events"`
	}
	c.do("GET", "/api/v1/emails/"+id+"/events", nil, 200, &out)
	return out.Events
}

// readyz is the status GET /readyz reports when it answers 200.
func (c *apiClient) readyz() string {
	c.t.Helper()
	var out struct {
		Status string `json:"status"`
	}
	c.do("GET", "/readyz", nil, 200, &out)
	return out.Status
}

func (c *apiClient) suppressions() []Suppression {
	c.t.Helper()
	var out struct {
		Suppressions []Suppression `json:"suppressions"`
	}
	c.do("GET", "/api/v1/suppressions", nil, 200, &out)
	return out.Suppressions
}

// statsOn is the totals of one UTC day (YYYY-MM-DD).
func (c *apiClient) statsOn(day string) StatTotals {
	c.t.Helper()
	var out struct {
		Totals StatTotals `json:"totals"`
	}
	c.do("GET", "/api/v1/stats?start="+day+"&end="+day, nil, 200, &out)
	return out.Totals
}

// deref is *p, "" for nil: for comparing a nullable field with a value.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// today is the UTC date the stats count in.
func today() string { return time.Now().UTC().Format("2006-01-02") }

// The transport.

// do sends a request and fails the test unless it answers wantStatus; out
// (nil to skip) receives the envelope's data.
func (c *apiClient) do(method, path string, body any, wantStatus int, out any) {
	c.t.Helper()
	status, raw, err := c.send1(method, path, body, nil)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	if status != wantStatus {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, wantStatus, raw)
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		c.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
	}
	if out == nil {
		return
	}
	if err := decodeAll(env.Data, out); err != nil {
		c.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
	}
}

// fail sends a request (without a body) that must fail with status and the
// error code.
func (c *apiClient) fail(method, path string, status int, code string) {
	c.t.Helper()
	got, raw, err := c.send1(method, path, nil, nil)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(raw, &body)
	if got != status || body.Error.Code != code {
		c.t.Fatalf("%s %s: %d %q, want %d %q", method, path, got, body.Error.Code, status, code)
	}
}

// status sends a request without a body and returns the answer's status.
func (c *apiClient) status(method, path string) int {
	c.t.Helper()
	got, _, err := c.send1(method, path, nil, nil)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return got
}

// keyedAnswer is an API answer to a POST sent with an Idempotency-Key.
type keyedAnswer struct {
	status   int
	body     []byte
	replayed bool
}

// postWithKey sends a POST with an Idempotency-Key; err is a transport error
// (the process died, say), which the caller judges.
func (c *apiClient) postWithKey(path, idempotencyKey string, body any) (keyedAnswer, error) {
	var replayed bool
	status, raw, err := c.send1("POST", path, body, func(req *http.Request, res *http.Response) {
		if res == nil {
			req.Header.Set("Idempotency-Key", idempotencyKey)
			return
		}
		replayed = res.Header.Get("Idempotent-Replayed") == "true"
	})
	if err != nil {
		return keyedAnswer{}, err
	}
	return keyedAnswer{status: status, body: raw, replayed: replayed}, nil
}

// send1 sends one request with the client's key and reads the whole answer;
// hook, when set, sees the request before it is sent (res nil) and the
// answer after.
func (c *apiClient) send1(method, path string, body any, hook func(*http.Request, *http.Response)) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := c.request(method, path, body).WithContext(ctx)
	if hook != nil {
		hook(req, nil)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, err
	}
	if hook != nil {
		hook(req, res)
	}
	return res.StatusCode, raw, nil
}

// request is a request with the client's key and body as JSON, for a test
// that sends it its own way (with a time limit of its own, say).
func (c *apiClient) request(method, path string, body any) *http.Request {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			panic(err) // the tests' own bodies
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// decodeAll decodes raw into out and checks that every field out names is in
// the JSON (at any depth; fields tagged omitempty may be absent).
func decodeAll(raw []byte, out any) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return err
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return err
	}
	return present(reflect.TypeOf(out).Elem(), generic, "data")
}

// present checks that v (decoded JSON) has every field of t.
func present(t reflect.Type, v any, at string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		items, _ := v.([]any)
		for i, item := range items {
			if err := present(t.Elem(), item, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return nil
		}
		obj, ok := v.(map[string]any)
		if !ok {
			if v == nil {
				return nil // null: the field's own presence was checked
			}
			return fmt.Errorf("%s is not an object", at)
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				if err := present(f.Type, v, at); err != nil {
					return err
				}
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			fv, ok := obj[name]
			if !ok {
				if strings.Contains(opts, "omitempty") {
					continue
				}
				return fmt.Errorf("%s has no %q", at, name)
			}
			if err := present(f.Type, fv, at+"."+name); err != nil {
				return err
			}
		}
	}
	return nil
}
