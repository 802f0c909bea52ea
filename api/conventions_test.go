package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mailyard/mailyard/internal/eventtype"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/store"
)

func TestListDomainsEmpty(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/api/v1/domains", h.adminKey, nil)
	if strings.TrimSpace(string(r.Raw)) != `{"status":"success","data":{"domains":[]}}` {
		t.Fatalf("body %s", r.Raw)
	}
}

func TestListDomainsSeesOnlyOwnOrganization(t *testing.T) {
	h := newHarness(t)
	otherOrg, otherKey := h.newOrg("other")
	ctx := context.Background()
	for _, d := range []store.Domain{
		{OrganizationID: h.orgID, Domain: "a.example", MailFromSubdomain: "mail.a.example", DKIMToken: "tokena", Status: "pending"},
		{OrganizationID: otherOrg, Domain: "b.example", MailFromSubdomain: "mail.b.example", DKIMToken: "tokenb", Status: "verified"},
	} {
		if err := h.store.CreateDomain(ctx, &d, nil); err != nil {
			t.Fatal(err)
		}
	}
	list := h.do("GET", "/api/v1/domains", h.adminKey, nil).data(t, 200)["domains"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["domain"] != "a.example" {
		t.Fatalf("own list %v", list)
	}
	first := list[0].(map[string]any)
	for _, f := range []string{"id", "domain", "mailfrom_subdomain", "status", "created_at"} {
		if _, ok := first[f]; !ok {
			t.Fatalf("domain lacks %s: %v", f, first)
		}
	}
	if !strings.HasSuffix(first["created_at"].(string), "Z") {
		t.Fatalf("created_at not UTC with Z: %v", first["created_at"])
	}
	other := h.do("GET", "/api/v1/domains", otherKey, nil).data(t, 200)["domains"].([]any)
	if len(other) != 1 || other[0].(map[string]any)["domain"] != "b.example" {
		t.Fatalf("other list %v", other)
	}
}

func TestAuthenticationFailures(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()

	revoked := h.newKeySecret()
	revokedKey := keyauth.WithSecret(revoked, &store.APIKey{OrganizationID: h.orgID, Label: "r", Username: "r", Permissions: store.Permissions{"admin"}, Status: store.KeyRevoked})
	sendOnly := h.newKeySecret()
	sendKey := keyauth.WithSecret(sendOnly, &store.APIKey{OrganizationID: h.orgID, Label: "s", Username: "s", Permissions: store.Permissions{"send", "stats"}, Status: store.KeyActive})
	for _, k := range []*store.APIKey{revokedKey, sendKey} {
		if _, err := h.store.DB.NewInsert().Model(k).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	valid := h.adminKey
	mutated := valid[:10] + string(rune(valid[10]^1)) + valid[11:]

	cases := []struct {
		name   string
		header string
		status int
		code   string
	}{
		{"no header", "", 401, "unauthorized"},
		{"not bearer", "Basic " + valid, 401, "unauthorized"},
		{"empty bearer", "Bearer ", 401, "unauthorized"},
		{"malformed", "Bearer not-a-key", 401, "unauthorized"},
		{"bad checksum", "Bearer " + mutated, 401, "unauthorized"},
		{"unknown", "Bearer " + h.newKeySecret(), 401, "unauthorized"},
		{"revoked", "Bearer " + revoked, 401, "unauthorized"},
		{"no admin permission", "Bearer " + sendOnly, 403, "forbidden"},
		{"lower-case scheme works", "bearer " + valid, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", h.srv.URL+"/api/v1/domains", nil)
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d", res.StatusCode, c.status)
			}
			if c.status == 401 && !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without WWW-Authenticate: Bearer")
			}
		})
	}
	h.do("GET", "/api/v1/domains", "", nil).expectError(t, 401, "unauthorized")
	h.do("GET", "/api/v1/domains", sendOnly, nil).expectError(t, 403, "forbidden")
}

func TestUnknownRouteAndWrongMethod(t *testing.T) {
	h := newHarness(t)
	h.do("GET", "/api/v1/nothing-here", h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("GET", "/", "", nil).expectError(t, 404, "not_found")
	r := h.do("PATCH", "/api/v1/domains", h.adminKey, nil)
	r.expectError(t, 404, "not_found")
	if !strings.Contains(r.Header.Get("Allow"), "GET") {
		t.Fatalf("wrong method answered without Allow: %v", r.Header)
	}
}

func TestRequestID(t *testing.T) {
	h := newHarness(t)
	req, _ := http.NewRequest("GET", h.srv.URL+"/healthz", nil)
	req.Header.Set("X-Request-Id", "client-chosen-42")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("X-Request-Id"); got != "client-chosen-42" {
		t.Fatalf("echoed %q", got)
	}
	for _, path := range []string{"/healthz", "/api/v1/domains", "/missing"} {
		if id := h.do("GET", path, "", nil).Header.Get("X-Request-Id"); len(id) < 16 {
			t.Fatalf("%s: generated request id %q", path, id)
		}
	}
}

func TestHealthAndReadiness(t *testing.T) {
	h := newHarness(t)
	if d := h.do("GET", "/healthz", "", nil).data(t, 200); d["status"] != "ok" {
		t.Fatalf("healthz %v", d)
	}
	if d := h.do("GET", "/readyz", "", nil).data(t, 200); d["status"] != "ok" {
		t.Fatalf("readyz %v", d)
	}
	// With the database gone, readiness says so in the error envelope.
	_ = h.store.Close()
	r := h.do("GET", "/readyz", "", nil)
	r.expectError(t, 503, "unavailable")
	if !strings.Contains(string(r.Raw), "database") {
		t.Fatalf("readyz does not name the database: %s", r.Raw)
	}
	// And an authenticated request answers 503, not 500.
	h.do("GET", "/api/v1/domains", h.adminKey, nil).expectError(t, 503, "unavailable")
}

func TestOpenAPIDocument(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/openapi.json", "", nil)
	if r.Status != 200 {
		t.Fatalf("openapi.json %d", r.Status)
	}
	doc := string(r.Raw)
	for _, want := range []string{`"bearer"`, `"scheme":"bearer"`, `"ErrorResponse"`, `"list-domains"`, `"3.1.0"`} {
		if !strings.Contains(doc, want) {
			t.Fatalf("openapi.json lacks %s", want)
		}
	}
	if strings.Contains(doc, "$schema") {
		t.Fatalf("openapi.json advertises $schema links")
	}
	if r := h.do("GET", "/openapi.yaml", "", nil); r.Status != 200 || !strings.Contains(string(r.Raw), "openapi: 3.1.0") {
		t.Fatalf("openapi.yaml %d", r.Status)
	}
	if r := h.do("GET", "/docs", "", nil); r.Status != 200 || !strings.Contains(string(r.Raw), "<html") {
		t.Fatalf("docs %d", r.Status)
	}
}

// The event-type enums of the OpenAPI documents come from the catalogue:
// webhooks take every type, ingest and sample events the email events only.
func TestOpenAPIEventTypeEnums(t *testing.T) {
	h := newHarness(t)
	type schema struct {
		Properties map[string]struct {
			Enum  []string `json:"enum"`
			Items struct {
				Enum []string `json:"enum"`
			} `json:"items"`
		} `json:"properties"`
	}
	var public, internal struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(h.do("GET", "/openapi.json", "", nil).Raw, &public); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(h.internal().URL + "/internal/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&internal); err != nil {
		t.Fatal(err)
	}
	all, email := eventtype.Strings(eventtype.All()), eventtype.Strings(eventtype.Email())
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"create webhook", public.Components.Schemas["CreateWebhookInputBody"].Properties["event_types"].Items.Enum, all},
		{"webhook", public.Components.Schemas["Webhook"].Properties["event_types"].Items.Enum, all},
		{"delivery", public.Components.Schemas["Delivery"].Properties["event_type"].Enum, all},
		{"test event", public.Components.Schemas["TestWebhookInputBody"].Properties["event_type"].Enum, email},
		{"ingest", internal.Components.Schemas["IngestEventInputBody"].Properties["event_type"].Enum, email},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s enum %v, want %v", c.name, c.got, c.want)
		}
	}
}
