package api_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
)

// domainInStatus stores a domain of the organization in the given status, as the
// onboarding workflow would leave it.
func (h *harness) domainInStatus(orgID int64, name, status string) int64 {
	h.t.Helper()
	token, err := keys.RandomString(32, keys.LowerAlnum)
	if err != nil {
		h.t.Fatal(err)
	}
	d := &store.Domain{OrganizationID: orgID, Domain: name, MailFromSubdomain: "mail." + name, DKIMToken: token, Status: status}
	if err := h.store.CreateDomain(context.Background(), d, nil); err != nil {
		h.t.Fatal(err)
	}
	return d.ID
}

// issueCredential creates a credential through the API and returns its id and key.
func (h *harness) issueCredential(key string, domainID int64, label string, perms ...string) (int64, string) {
	h.t.Helper()
	d := h.do("POST", "/api/v1/credentials", key, map[string]any{
		"sending_domain_id": domainID, "label": label, "permissions": perms,
	}).data(h.t, 201)
	return int64(d["credential"].(map[string]any)["id"].(float64)), d["secret_key"].(string)
}

func TestCreateCredential(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "send.example", store.DomainVerified)

	r := h.do("POST", "/api/v1/credentials", h.adminKey, map[string]any{
		"sending_domain_id": domainID, "label": "  production sender  ", "permissions": []string{"send", "stats"},
	})
	d := r.data(t, 201)
	if len(d) != 2 {
		t.Fatalf("data has %d members, want credential and secret_key: %s", len(d), r.Raw)
	}
	cred := d["credential"].(map[string]any)
	if len(cred) != 5 {
		t.Fatalf("credential has fields %v, want id, label, username, permissions, status", cred)
	}
	if cred["label"] != "production sender" || cred["status"] != "active" || fmt.Sprint(cred["permissions"]) != "[send stats]" {
		t.Fatalf("credential %v", cred)
	}
	if !regexp.MustCompile(`^[a-z0-9]{10}@send\.example$`).MatchString(cred["username"].(string)) {
		t.Fatalf("username %q", cred["username"])
	}
	secret := d["secret_key"].(string)
	if keys.CheckAPIKey(secret) != nil {
		t.Fatalf("secret key %q is not a well-formed key", secret)
	}

	// Only the digest is stored: no column holds the secret.
	row := new(store.APIKey)
	if err := h.store.DB.NewSelect().Model(row).Where("id = ?", int64(cred["id"].(float64))).Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(row.Digest, keys.Digest(secret)) || row.SendingDomainID == nil || *row.SendingDomainID != domainID {
		t.Fatalf("stored %+v", row)
	}
	if strings.Contains(row.Prefix, secret[keys.DisplayLength:]) || len(row.Prefix) != keys.DisplayLength {
		t.Fatalf("prefix %q keeps too much of the key", row.Prefix)
	}

	// The key works at once; a send+stats key is refused admin operations.
	h.do("GET", "/api/v1/credentials", secret, nil).expectError(t, 403, "forbidden")
	_, adminSecret := h.issueCredential(h.adminKey, domainID, "ops", "admin")
	h.do("GET", "/api/v1/credentials", adminSecret, nil).data(t, 200)
}

func TestListCredentials(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "list.example", store.DomainVerified)
	id, _ := h.issueCredential(h.adminKey, domainID, "sender", "send")
	revokedID, _ := h.issueCredential(h.adminKey, domainID, "old", "stats")
	h.do("DELETE", fmt.Sprintf("/api/v1/credentials/%d", revokedID), h.adminKey, nil).data(t, 200)
	otherOrg, _ := h.newOrg("other")
	h.domainInStatus(otherOrg, "other.example", store.DomainVerified)

	list := h.do("GET", "/api/v1/credentials", h.adminKey, nil).data(t, 200)["credentials"].([]any)
	if len(list) != 2 {
		t.Fatalf("want the bootstrap key and the active credential, got %v", list)
	}
	boot, sender := list[0].(map[string]any), list[1].(map[string]any)
	for _, c := range list {
		c := c.(map[string]any)
		for _, f := range []string{"id", "label", "username", "sending_domain", "permissions", "status", "last_used_at", "created_at"} {
			if _, ok := c[f]; !ok {
				t.Fatalf("credential lacks %s: %v", f, c)
			}
		}
		if created := c["created_at"].(string); !strings.HasSuffix(created, "Z") {
			t.Fatalf("created_at %q is not UTC with Z", created)
		}
		if c["status"] != "active" {
			t.Fatalf("listed %v", c)
		}
	}
	if boot["sending_domain"] != nil || fmt.Sprint(boot["permissions"]) != "[admin]" {
		t.Fatalf("bootstrap key %v", boot)
	}
	if sender["id"].(float64) != float64(id) || sender["sending_domain"] != "list.example" || sender["label"] != "sender" || fmt.Sprint(sender["permissions"]) != "[send]" {
		t.Fatalf("credential %v", sender)
	}
	// The sender key was never used; the admin key was used by the list itself,
	// but last_used_at is recorded off the request path, so only its null-ness for
	// the unused key is certain here.
	if sender["last_used_at"] != nil {
		t.Fatalf("unused key has last_used_at %v", sender["last_used_at"])
	}
}

func TestCreateCredentialRefusals(t *testing.T) {
	h := newHarness(t)
	verified := h.domainInStatus(h.orgID, "ok.example", store.DomainVerified)
	pending := h.domainInStatus(h.orgID, "pending.example", store.DomainPending)
	failed := h.domainInStatus(h.orgID, "failed.example", store.DomainFailed)
	otherOrg, _ := h.newOrg("other")
	foreign := h.domainInStatus(otherOrg, "foreign.example", store.DomainVerified)

	body := func(domainID int64) map[string]any {
		return map[string]any{"sending_domain_id": domainID, "label": "x", "permissions": []string{"send"}}
	}
	h.do("POST", "/api/v1/credentials", h.adminKey, body(foreign+1000)).expectError(t, 404, "not_found")
	r := h.do("POST", "/api/v1/credentials", h.adminKey, body(foreign))
	r.expectError(t, 404, "not_found")
	if strings.Contains(string(r.Raw), "foreign.example") {
		t.Fatalf("404 leaks the foreign domain: %s", r.Raw)
	}
	h.do("POST", "/api/v1/credentials", h.adminKey, body(pending)).expectError(t, 409, "domain_not_verified")
	h.do("POST", "/api/v1/credentials", h.adminKey, body(failed)).expectError(t, 409, "domain_not_verified")

	cases := []struct {
		name      string
		body      string
		locations []string
	}{
		{"empty label", `{"sending_domain_id":%d,"label":"","permissions":["send"]}`, []string{"body.label"}},
		{"blank label", `{"sending_domain_id":%d,"label":"   ","permissions":["send"]}`, []string{"body.label"}},
		{"long label", `{"sending_domain_id":%d,"label":"` + strings.Repeat("é", 101) + `","permissions":["send"]}`, []string{"body.label"}},
		{"null permissions", `{"sending_domain_id":%d,"label":"x","permissions":null}`, []string{"body.permissions"}},
		{"no permissions", `{"sending_domain_id":%d,"label":"x","permissions":[]}`, []string{"body.permissions"}},
		{"unknown permission", `{"sending_domain_id":%d,"label":"x","permissions":["send","root"]}`, []string{"body.permissions[1]"}},
		{"duplicate permission", `{"sending_domain_id":%d,"label":"x","permissions":["send","stats","send"]}`, []string{"body.permissions[2]"}},
		{"every field at once", `{"sending_domain_id":%d,"label":" ","permissions":["admin","admin","nope"]}`, []string{"body.label", "body.permissions[1]", "body.permissions[2]"}},
		// The store cannot take a NUL (it was a 500); the other control
		// characters, C0, DEL and C1, were stored as sent.
		{"NUL in label", `{"sending_domain_id":%d,"label":"a\u0000b","permissions":["send"]}`, []string{"body.label"}},
		{"C0 in label", `{"sending_domain_id":%d,"label":"a\u0001b","permissions":["send"]}`, []string{"body.label"}},
		{"line break inside label", `{"sending_domain_id":%d,"label":"a\nb","permissions":["send"]}`, []string{"body.label"}},
		{"DEL in label", `{"sending_domain_id":%d,"label":"a\u007fb","permissions":["send"]}`, []string{"body.label"}},
		{"C1 in label", `{"sending_domain_id":%d,"label":"a\u0085b","permissions":["send"]}`, []string{"body.label"}},
		// A bidirectional override makes a label display as another
		// ("\u202Etset" reads "test").
		{"bidi override in label", `{"sending_domain_id":%d,"label":"\u202Etset","permissions":["send"]}`, []string{"body.label"}},
		{"bidi isolate in label", `{"sending_domain_id":%d,"label":"a\u2066b","permissions":["send"]}`, []string{"body.label"}},
		{"NUL label and bad permission", `{"sending_domain_id":%d,"label":"\u0000","permissions":["send","send"]}`, []string{"body.label", "body.permissions[1]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/api/v1/credentials", h.adminKey, fmt.Sprintf(c.body, verified))
			r.expectError(t, 422, "validation_failed")
			got := r.detailLocations()
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(c.locations, " ") {
				t.Fatalf("details at %v, want %v: %s", got, c.locations, r.Raw)
			}
		})
	}
	// Each missing field gets its own detail.
	r = h.do("POST", "/api/v1/credentials", h.adminKey, `{}`)
	r.expectError(t, 422, "validation_failed")
	missing := r.detailLocations()
	sort.Strings(missing)
	if strings.Join(missing, " ") != "body.label body.permissions body.sending_domain_id" {
		t.Fatalf("details for {} at %v: %s", missing, r.Raw)
	}

	// A zero-width joiner is part of emoji and some scripts: it stays.
	if got := h.do("POST", "/api/v1/credentials", h.adminKey, map[string]any{
		"sending_domain_id": verified, "label": "team \U0001F469\u200D\U0001F4BB", "permissions": []string{"send"},
	}).data(t, 201)["credential"].(map[string]any); got["label"] != "team \U0001F469\u200D\U0001F4BB" {
		t.Fatalf("label %q", got["label"])
	}
	// A label of exactly 100 characters (after trimming) is fine.
	h.do("POST", "/api/v1/credentials", h.adminKey, map[string]any{
		"sending_domain_id": verified, "label": " " + strings.Repeat("é", 100) + " ", "permissions": []string{"send"},
	}).data(t, 201)
	// Line breaks and tabs around the label are trimmed, not refused.
	created := h.do("POST", "/api/v1/credentials", h.adminKey, map[string]any{
		"sending_domain_id": verified, "label": "\tpasted label\r\n", "permissions": []string{"send"},
	}).data(t, 201)
	if label := created["credential"].(map[string]any)["label"]; label != "pasted label" {
		t.Fatalf("label stored as %q, want it trimmed", label)
	}
}

func TestDeleteCredential(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "del.example", store.DomainVerified)
	id, secret := h.issueCredential(h.adminKey, domainID, "to revoke", "admin")
	h.do("GET", "/api/v1/credentials", secret, nil).data(t, 200)

	path := fmt.Sprintf("/api/v1/credentials/%d", id)
	r := h.do("DELETE", path, h.adminKey, nil)
	cred := r.data(t, 200)["credential"].(map[string]any)
	if len(cred) != 4 || cred["id"].(float64) != float64(id) || cred["label"] != "to revoke" || cred["status"] != "revoked" ||
		!strings.HasSuffix(cred["username"].(string), "@del.example") {
		t.Fatalf("revoked credential %v", cred)
	}
	h.do("GET", "/api/v1/credentials", secret, nil).expectError(t, 401, "unauthorized")
	h.do("DELETE", path, h.adminKey, nil).expectError(t, 404, "not_found")
	for _, c := range h.do("GET", "/api/v1/credentials", h.adminKey, nil).data(t, 200)["credentials"].([]any) {
		if c.(map[string]any)["id"].(float64) == float64(id) {
			t.Fatalf("revoked credential still listed")
		}
	}
	// An id no credential can have is an unknown one (404), as a webhook's
	// or an email's is; one that is not a number at all is malformed.
	h.do("DELETE", "/api/v1/credentials/0", h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("GET", "/api/v1/domains/-1", h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("GET", "/api/v1/emails/abc", h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("DELETE", "/api/v1/credentials/abc", h.adminKey, nil).expectError(t, 422, "validation_failed")
}

func TestCredentialRevokesItself(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "self.example", store.DomainVerified)
	id, secret := h.issueCredential(h.adminKey, domainID, "self", "admin")
	h.do("DELETE", fmt.Sprintf("/api/v1/credentials/%d", id), secret, nil).data(t, 200)
	h.do("GET", "/api/v1/credentials", secret, nil).expectError(t, 401, "unauthorized")
}

func TestConcurrentDeletesRevokeOnce(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "race.example", store.DomainVerified)
	id, _ := h.issueCredential(h.adminKey, domainID, "raced", "send")
	path := fmt.Sprintf("/api/v1/credentials/%d", id)
	statuses := make(chan int, 2)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- h.do("DELETE", path, h.adminKey, nil).Status
		}()
	}
	wg.Wait()
	close(statuses)
	got := map[int]int{}
	for s := range statuses {
		got[s]++
	}
	if got[200] != 1 || got[404] != 1 {
		t.Fatalf("concurrent deletes answered %v, want one 200 and one 404", got)
	}
}
