package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/mailyard/mailyard/internal/store"
)

// The tenant-isolation walk: every operation of the generated OpenAPI document that
// needs a key is tried, with the owner organization's ids, by
//
//	no key                                  → 401
//	a revoked key of the owner              → 401
//	an owner key without admin (send+stats) → 403, unless the operation's security
//	                                          requirement admits send or stats: then a
//	                                          success
//	another organization's admin key        → 404 where the request names an owner
//	                                          resource (exactly as for an id that does
//	                                          not exist), otherwise a success in its own
//	                                          organization; never any owner data.
//
// Because the walk reads the document, a new route is covered the day it is added.
// What the walk cannot invent — an id for a new kind of path parameter, a valid body
// for a new operation — makes it fail with a message that says what to add here.

// pathResources maps the path segment before a parameter (".../webhooks/{id}") to the
// owner fixture that fills it.
var pathResources = map[string]func(*ownerFixtures) string{
	"domains":      func(f *ownerFixtures) string { return strconv.FormatInt(f.domainID, 10) },
	"credentials":  func(f *ownerFixtures) string { return strconv.FormatInt(f.credentialID, 10) },
	"webhooks":     func(f *ownerFixtures) string { return strconv.FormatInt(f.webhook(), 10) },
	"deliveries":   func(f *ownerFixtures) string { return f.delivery() },
	"suppressions": func(f *ownerFixtures) string { return f.suppression() },
	"emails":       func(f *ownerFixtures) string { return f.email() },
	// Not a path segment: the owner's domain name, which a sending body's
	// from address must be at.
	"domain-name": func(f *ownerFixtures) string { return f.domainName },
}

// ghostIDs are ids of the same kinds that exist nowhere.
var ghostIDs = map[string]string{
	"domains":      "987654321",
	"credentials":  "987654322",
	"webhooks":     "987654323",
	"deliveries":   "6f1c2b1e-0000-4000-8000-000000000000",
	"suppressions": "ghost-recipient@nowhere.example",
	"emails":       "01a20a97-0000-7000-8000-000000000000",
	"domain-name":  "ghost-domain.example",
}

// queryValues are the values of required query parameters, keyed by method and
// path template, then by parameter.
var queryValues = map[string]map[string]string{
	"GET /api/v1/stats": {"start": "2026-11-01", "end": "2026-11-30"},
}

// requestBodies are valid bodies, keyed by method and path template (fixed by the
// product contract, so they are known before an operation exists), so that a
// refusal comes from ownership and not from validation. ids resolves an owner
// resource kind to the id the body should carry. ownsRefs tells that the body names
// owner resources, so another organization must get 404.
var requestBodies = map[string]struct {
	body     func(ids func(kind string) string) any
	ownsRefs bool
}{
	"POST /api/v1/credentials": {ownsRefs: true, body: func(ids func(string) string) any {
		id, _ := strconv.ParseInt(ids("domains"), 10, 64)
		return map[string]any{"sending_domain_id": id, "label": "isolation", "permissions": []string{"send"}}
	}},
	"POST /api/v1/emails": {body: func(ids func(string) string) any {
		return map[string]any{"from": "app@" + ids("domain-name"), "to": "isolation@recipient.example", "subject": "Isolation", "text": "Hello."}
	}},
	"POST /api/v1/emails/batch": {body: func(ids func(string) string) any {
		return []map[string]any{{"from": "app@" + ids("domain-name"), "to": "isolation@recipient.example", "subject": "Isolation", "text": "Hello."}}
	}},
	"PATCH /api/v1/emails/{id}": {body: func(func(string) string) any {
		return map[string]any{"scheduled_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	}},
	"POST /api/v1/domains": {body: func(func(string) string) any {
		return map[string]any{"domain": "intruder-" + uuid.NewString()[:8] + ".example.org"}
	}},
	"PATCH /api/v1/domains/{id}/dkim": {body: func(func(string) string) any {
		return map[string]any{"rotation_interval_days": 90}
	}},
	// Turning tracking off needs no MAILYARD_TRACKING_URL.
	"PATCH /api/v1/domains/{id}/tracking": {body: func(func(string) string) any {
		return map[string]any{"opens": false}
	}},
	"POST /api/v1/webhooks": {body: func(func(string) string) any {
		return map[string]any{"url": "https://intruder.example.org/hooks", "event_types": []string{"delivered"}}
	}},
	"PATCH /api/v1/webhooks/{id}": {body: func(func(string) string) any {
		return map[string]any{"status": "disabled"}
	}},
	"POST /api/v1/webhooks/{id}/recover": {body: func(func(string) string) any {
		return map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}
	}},
	"POST /api/v1/webhooks/{id}/secret/rotate": {body: func(func(string) string) any {
		return map[string]any{"expire_previous_in_seconds": 0}
	}},
	"POST /api/v1/webhooks/{id}/test": {body: func(func(string) string) any {
		return map[string]any{"event_type": "delivered"}
	}},
}

// stateRefusals are the errors by which an operation that admitted the
// owner's key refuses because of the resource's state, not the key: the
// owner's email is not scheduled, so it cannot be moved or canceled.
var stateRefusals = map[string]string{
	"PATCH /api/v1/emails/{id}":       "email_not_scheduled",
	"POST /api/v1/emails/{id}/cancel": "email_not_scheduled",
}

// ownerFixtures are the owner organization's resources and keys. Webhooks and
// deliveries are made on first use: they exist only once their operations do.
type ownerFixtures struct {
	h            *harness
	t            *testing.T
	domainID     int64
	credentialID int64
	limitedKey   string // send and stats, no admin
	revokedKey   string
	webhookID    int64
	deliveryID   string
	suppressed   string
	domainName   string
	emailID      string
	// private are strings only the owner may ever see in an answer.
	private []string
}

func newOwnerFixtures(t *testing.T, h *harness) *ownerFixtures {
	tag := uuid.NewString()[:8]
	f := &ownerFixtures{h: h, t: t}
	domain := "owner-" + tag + ".example.com"
	f.domainName = domain
	f.domainID = h.domainInStatus(h.orgID, domain, store.DomainVerified)
	label := "owner label " + tag
	f.credentialID, _ = h.issueCredential(h.adminKey, f.domainID, label, "send")
	_, f.limitedKey = h.issueCredential(h.adminKey, f.domainID, "limited "+tag, "send", "stats")
	var revokedID int64
	revokedID, f.revokedKey = h.issueCredential(h.adminKey, f.domainID, "revoked "+tag, "admin")
	h.do("DELETE", fmt.Sprintf("/api/v1/credentials/%d", revokedID), h.adminKey, nil).data(t, 200)
	f.private = []string{domain, "mail." + domain, label, "limited " + tag, "revoked " + tag}
	for _, c := range h.do("GET", "/api/v1/credentials", h.adminKey, nil).data(t, 200)["credentials"].([]any) {
		if c := c.(map[string]any); c["sending_domain"] != nil { // the harness's bootstrap keys share a username
			f.private = append(f.private, c["username"].(string))
		}
	}
	return f
}

// webhook creates the owner's webhook through the API the first time it is needed.
func (f *ownerFixtures) webhook() int64 {
	if f.webhookID == 0 {
		if !hasOperation(f.h, http.MethodPost, "/api/v1/webhooks") {
			f.t.Fatal("an operation addresses a webhook but POST /api/v1/webhooks, which would create the fixture, is not in the document")
		}
		url := "https://owner-" + uuid.NewString()[:8] + ".example.net/mailyard-events"
		d := f.h.do("POST", "/api/v1/webhooks", f.h.adminKey, map[string]any{"url": url, "event_types": []string{"delivered", "bounced"}}).data(f.t, 201)
		f.webhookID = int64(d["webhook"].(map[string]any)["id"].(float64))
		f.private = append(f.private, url)
		if secret, ok := d["signing_secret"].(string); ok {
			f.private = append(f.private, secret)
		}
	}
	return f.webhookID
}

// delivery stores one delivery to the owner's webhook, as a sample event would.
func (f *ownerFixtures) delivery() string {
	if f.deliveryID == "" {
		d := &store.Delivery{
			ID: uuid.NewString(), OrganizationID: f.h.orgID, WebhookID: f.webhook(), EventType: "delivered",
			Body: []byte(`{"event_type":"delivered","timestamp":"2026-11-21T10:00:00Z","data":{"message_id":"m","to_email":"owner@example.com","subject":"owner subject"}}`),
		}
		if err := f.h.store.CreateDelivery(context.Background(), d); err != nil {
			f.t.Fatal(err)
		}
		f.deliveryID = d.ID
		f.private = append(f.private, "owner@example.com", "owner subject")
	}
	return f.deliveryID
}

// suppression puts an address on the owner's suppression list, as a hard
// bounce would.
func (f *ownerFixtures) suppression() string {
	if f.suppressed == "" {
		f.suppressed = "owner-recipient-" + uuid.NewString()[:8] + "@example.com"
		if err := store.Suppress(context.Background(), f.h.store.DB, f.h.orgID, f.suppressed, store.SuppressionHardBounce); err != nil {
			f.t.Fatal(err)
		}
		f.private = append(f.private, f.suppressed)
	}
	return f.suppressed
}

// email makes an email of the owner's: queued, never started (the walk
// reads it; no worker sends it).
func (f *ownerFixtures) email() string {
	if f.emailID == "" {
		id := uuid.Must(uuid.NewV7()).String()
		subject, rcpt := "owner subject "+id[:8], "owner-rcpt-"+id[:8]+"@recipient.example"
		e := &store.Email{ID: id, OrganizationID: f.h.orgID, DomainID: f.domainID, FromAddress: "app@" + f.domainName,
			To: store.AddressList{rcpt}, Subject: subject}
		if err := f.h.store.CreateEmail(context.Background(), e, []string{rcpt}); err != nil {
			f.t.Fatal(err)
		}
		f.emailID = id
		f.private = append(f.private, subject, rcpt)
	}
	return f.emailID
}

// admitsAdmin tells whether the operation admits an admin key; a send-only
// operation refuses it (403) even in its own organization.
func admitsAdmin(op *huma.Operation) bool {
	for _, req := range op.Security {
		for _, role := range req["bearer"] {
			if role == "admin" {
				return true
			}
		}
	}
	return false
}

// admitsLimitedKey tells whether the operation's security requirement admits
// a key with send or stats (and no admin).
func admitsLimitedKey(op *huma.Operation) bool {
	for _, req := range op.Security {
		for _, role := range req["bearer"] {
			if role == "send" || role == "stats" {
				return true
			}
		}
	}
	return false
}

func hasOperation(h *harness, method, path string) bool {
	item := h.api.OpenAPI().Paths[path]
	return item != nil && operationsOf(item)[method] != nil
}

func operationsOf(item *huma.PathItem) map[string]*huma.Operation {
	return map[string]*huma.Operation{
		http.MethodGet: item.Get, http.MethodPut: item.Put, http.MethodPost: item.Post, http.MethodDelete: item.Delete,
		http.MethodPatch: item.Patch, http.MethodHead: item.Head, http.MethodOptions: item.Options, http.MethodTrace: item.Trace,
	}
}

// documentedOperation is one operation of the document.
type documentedOperation struct {
	method, path string
	op           *huma.Operation
}

// bearerOperations lists the operations that need a key, in a stable order. An
// operation under /api/v1 that needs none fails the test: it would be outside
// every organization.
func bearerOperations(t *testing.T, doc *huma.OpenAPI) []documentedOperation {
	var out []documentedOperation
	for path, item := range doc.Paths {
		for method, op := range operationsOf(item) {
			if op == nil {
				continue
			}
			if len(op.Security) == 0 {
				if strings.HasPrefix(path, "/api/") {
					t.Errorf("%s %s (%s) needs no API key; every /api operation must", method, path, op.OperationID)
				}
				continue
			}
			out = append(out, documentedOperation{method: method, path: path, op: op})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].path != out[j].path {
			return out[i].path < out[j].path
		}
		return out[i].method < out[j].method
	})
	return out
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// isolationRequest is an operation's request with its parameters filled in.
type isolationRequest struct {
	method, path string
	body         any
	// namesOwnerResources is true when a path parameter or the body points at one
	// of the owner's resources.
	namesOwnerResources bool
}

// buildRequest fills the operation's path parameters and body with ids from ids.
// It refuses what it cannot fill, so that no operation escapes the walk.
func buildRequest(o documentedOperation, ids func(kind string) string) (isolationRequest, error) {
	req := isolationRequest{method: o.method}
	segments := strings.Split(o.path, "/")
	for i, seg := range segments {
		m := pathParam.FindStringSubmatch(seg)
		if m == nil {
			continue
		}
		kind := ""
		if i > 0 {
			kind = segments[i-1]
		}
		if _, ok := pathResources[kind]; !ok {
			return req, fmt.Errorf("%s %s (%s): no fixture for path parameter {%s} after %q; add one to pathResources in isolation_test.go",
				o.method, o.path, o.op.OperationID, m[1], kind)
		}
		segments[i] = ids(kind)
		req.namesOwnerResources = true
	}
	req.path = strings.Join(segments, "/")

	query := url.Values{}
	for _, p := range o.op.Parameters {
		if v, ok := queryValues[o.method+" "+o.path][p.Name]; ok && p.In == "query" {
			query.Set(p.Name, v)
			continue
		}
		if p.Required && p.In != "path" {
			return req, fmt.Errorf("%s %s (%s): required %s parameter %q has no value in the isolation test; teach buildRequest in isolation_test.go",
				o.method, o.path, o.op.OperationID, p.In, p.Name)
		}
	}

	if len(query) > 0 {
		req.path += "?" + query.Encode()
	}

	spec, known := requestBodies[o.method+" "+o.path]
	if o.op.RequestBody != nil && o.op.RequestBody.Required && !known {
		return req, fmt.Errorf("%s %s (%s) requires a body the isolation test does not know; add a valid one to requestBodies in isolation_test.go",
			o.method, o.path, o.op.OperationID)
	}
	if known {
		req.body = spec.body(ids)
		req.namesOwnerResources = req.namesOwnerResources || spec.ownsRefs
	}
	return req, nil
}

// The walk's guards: an operation it cannot fill is an error, never a silent skip.
func TestIsolationWalkRefusesWhatItCannotFill(t *testing.T) {
	ids := func(string) string { return "1" }
	for _, c := range []struct {
		o    documentedOperation
		want string
	}{
		{documentedOperation{method: "GET", path: "/api/v1/templates/{id}", op: &huma.Operation{OperationID: "get-template"}}, "pathResources"},
		{documentedOperation{method: "POST", path: "/api/v1/suppressions", op: &huma.Operation{OperationID: "add-suppression", RequestBody: &huma.RequestBody{Required: true}}}, "requestBodies"},
		{documentedOperation{method: "GET", path: "/api/v1/stats", op: &huma.Operation{OperationID: "stats", Parameters: []*huma.Param{{Name: "from", In: "query", Required: true}}}}, "buildRequest"},
	} {
		if _, err := buildRequest(c.o, ids); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.o.op.OperationID) {
			t.Errorf("%s %s: error %v, want one naming the operation and %s", c.o.method, c.o.path, err, c.want)
		}
	}
}

func TestTenantIsolation(t *testing.T) {
	h := newHarness(t)
	owner := newOwnerFixtures(t, h)
	_, intruderKey := h.newOrg("intruder")
	ownerIDs := func(kind string) string { return pathResources[kind](owner) }
	ghosts := func(kind string) string { return ghostIDs[kind] }

	ops := bearerOperations(t, h.api.OpenAPI())
	if !hasOperation(h, http.MethodDelete, "/api/v1/credentials/{id}") || len(ops) < 4 {
		t.Fatalf("the document lists only %d operations with a key; is it generated from the server?", len(ops))
	}
	for _, o := range ops {
		t.Run(o.method+" "+o.path, func(t *testing.T) {
			owner.t = t
			req, err := buildRequest(o, ownerIDs)
			if err != nil {
				t.Fatal(err)
			}

			h.do(req.method, req.path, "", req.body).expectError(t, 401, "unauthorized")
			h.do(req.method, req.path, owner.revokedKey, req.body).expectError(t, 401, "unauthorized")
			if limited := h.do(req.method, req.path, owner.limitedKey, req.body); !admitsLimitedKey(o.op) {
				limited.expectError(t, 403, "forbidden")
			} else if code, ok := stateRefusals[o.method+" "+o.path]; ok {
				limited.expectError(t, 409, code)
			} else if limited.Status >= 300 {
				t.Fatalf("the owner's send+stats key, admitted by the operation, got %d: %s", limited.Status, limited.Raw)
			}

			r := h.do(req.method, req.path, intruderKey, req.body)
			if !admitsAdmin(o.op) {
				r.expectError(t, 403, "forbidden")
				owner.expectNothingPrivate(t, r)
				return
			}
			owner.expectNothingPrivate(t, r)
			if !req.namesOwnerResources {
				if r.Status >= 300 {
					t.Fatalf("another organization's admin key, acting on its own organization, got %d: %s", r.Status, r.Raw)
				}
				return
			}
			r.expectError(t, 404, "not_found")
			// Existence is not leaked: an owner's id answers like an id that does not exist.
			ghost, err := buildRequest(o, ghosts)
			if err != nil {
				t.Fatal(err)
			}
			g := h.do(ghost.method, ghost.path, intruderKey, ghost.body)
			if normalised := normaliseIDs(g.Raw, ghosts, ownerIDs); normalised != string(r.Raw) {
				t.Fatalf("an owner's id answers differently from a missing one:\nowner's:  %s\nmissing: %s", r.Raw, g.Raw)
			}
		})
	}
	owner.t = t
	owner.expectIntact(t)
}

// normaliseIDs replaces the ghost ids in a body by the owner's, so that two 404s can
// be compared even when a message repeats the id the caller sent.
func normaliseIDs(raw []byte, ghosts, owners func(string) string) string {
	s := string(raw)
	for kind := range ghostIDs {
		if strings.Contains(s, ghosts(kind)) {
			s = strings.ReplaceAll(s, ghosts(kind), owners(kind))
		}
	}
	return s
}

// expectNothingPrivate fails when an answer to another organization carries any of
// the owner's names, labels, usernames, URLs or secrets.
func (f *ownerFixtures) expectNothingPrivate(t *testing.T, r response) {
	t.Helper()
	body := strings.ToLower(string(r.Raw))
	for _, p := range f.private {
		if strings.Contains(body, strings.ToLower(p)) {
			t.Fatalf("an answer to another organization contains the owner's %q: %s", p, r.Raw)
		}
	}
	for name := range r.Header {
		for _, v := range r.Header.Values(name) {
			for _, p := range f.private {
				if strings.Contains(strings.ToLower(v), strings.ToLower(p)) {
					t.Fatalf("header %s of an answer to another organization contains the owner's %q", name, p)
				}
			}
		}
	}
}

// expectIntact checks the walk changed nothing of the owner's: the intruder's
// deletes and revocations were refused.
func (f *ownerFixtures) expectIntact(t *testing.T) {
	t.Helper()
	creds := f.h.do("GET", "/api/v1/credentials", f.h.adminKey, nil).data(t, 200)["credentials"].([]any)
	found := false
	for _, c := range creds {
		if int64(c.(map[string]any)["id"].(float64)) == f.credentialID {
			found = true
		}
	}
	if !found {
		t.Fatal("the owner's credential is gone after the walk")
	}
	if f.suppressed != "" {
		if among, err := f.h.store.SuppressedAmong(context.Background(), f.h.orgID, []string{f.suppressed}, false); err != nil || !among[f.suppressed] {
			t.Fatalf("the owner's suppression is gone after the walk (%v)", err)
		}
	}
	if f.webhookID != 0 {
		raw, _ := json.Marshal(f.h.do("GET", "/api/v1/webhooks", f.h.adminKey, nil).data(t, 200))
		if !strings.Contains(string(raw), fmt.Sprintf(`"id":%d`, f.webhookID)) {
			t.Fatalf("the owner's webhook is gone after the walk: %s", raw)
		}
	}
}
