package api_test

import (
	"fmt"
	"testing"

	"github.com/mailyard/mailyard/internal/store"
)

func TestGetDomainShowsDKIMStateWithoutKeyMaterial(t *testing.T) {
	h := newHarness(t)
	id := h.domainInStatus(h.orgID, "detail.example", store.DomainPending)
	r := h.do("GET", fmt.Sprintf("/api/v1/domains/%d", id), h.adminKey, nil)
	dom := r.data(t, 200)["domain"].(map[string]any)
	if dom["domain"] != "detail.example" || dom["status"] != "pending" || dom["verified_at"] != nil || dom["last_checked_at"] != nil {
		t.Fatalf("domain %v", dom)
	}
	dkim := dom["dkim"].(map[string]any)
	rot := dkim["rotation"].(map[string]any)
	// Before the onboarding workflow made keys: none, nothing signs; rotation on
	// every 180 days, but no date before the domain is verified.
	if dkim["active_selector"] != nil || len(dkim["keys"].([]any)) != 0 ||
		rot["enabled"] != true || rot["interval_days"] != float64(180) || rot["next_rotation_at"] != nil || rot["in_progress"] != false {
		t.Fatalf("dkim %v", dkim)
	}

	// Another organization's id and an unknown id are both 404.
	_, otherKey := h.newOrg("other")
	h.do("GET", fmt.Sprintf("/api/v1/domains/%d", id), otherKey, nil).expectError(t, 404, "not_found")
	h.do("GET", "/api/v1/domains/999999", h.adminKey, nil).expectError(t, 404, "not_found")
}

func TestUpdateDKIMSettings(t *testing.T) {
	h := newHarness(t)
	id := h.domainInStatus(h.orgID, "settings.example", store.DomainPending)
	path := fmt.Sprintf("/api/v1/domains/%d/dkim", id)

	for _, days := range []int{7, 731} {
		r := h.do("PATCH", path, h.adminKey, map[string]any{"rotation_interval_days": days})
		r.expectError(t, 422, "validation_failed")
		if locs := r.detailLocations(); len(locs) == 0 || locs[0] != "body.rotation_interval_days" {
			t.Fatalf("%d days: details at %v", days, locs)
		}
	}
	h.do("PATCH", path, h.adminKey, map[string]any{}).expectError(t, 422, "validation_failed")

	dom := h.do("PATCH", path, h.adminKey, map[string]any{"rotation_enabled": false, "rotation_interval_days": 30}).data(t, 200)["domain"].(map[string]any)
	rot := dom["dkim"].(map[string]any)["rotation"].(map[string]any)
	if rot["enabled"] != false || rot["interval_days"] != float64(30) {
		t.Fatalf("after PATCH: %v", rot)
	}
	// Each setting alone leaves the other as it is.
	rot = h.do("PATCH", path, h.adminKey, map[string]any{"rotation_enabled": true}).data(t, 200)["domain"].(map[string]any)["dkim"].(map[string]any)["rotation"].(map[string]any)
	if rot["enabled"] != true || rot["interval_days"] != float64(30) {
		t.Fatalf("after the second PATCH: %v", rot)
	}
}

func TestRotateNeedsAVerifiedDomain(t *testing.T) {
	h := newHarness(t)
	for _, status := range []string{store.DomainPending, store.DomainFailed} {
		id := h.domainInStatus(h.orgID, status+".example", status)
		h.do("POST", fmt.Sprintf("/api/v1/domains/%d/dkim/rotate", id), h.adminKey, nil).expectError(t, 409, "domain_not_verified")
	}
	h.do("POST", "/api/v1/domains/424242/dkim/rotate", h.adminKey, nil).expectError(t, 404, "not_found")
}

func TestDeleteDomain(t *testing.T) {
	h := newHarness(t)
	id := h.domainInStatus(h.orgID, "gone.example", store.DomainVerified)
	_, scopedKey := h.issueCredential(h.adminKey, id, "scoped", "admin")
	keep := h.domainInStatus(h.orgID, "kept.example", store.DomainVerified)
	_, keptKey := h.issueCredential(h.adminKey, keep, "kept", "admin")
	_, otherKey := h.newOrg("other")
	path := fmt.Sprintf("/api/v1/domains/%d", id)

	h.do("DELETE", path, otherKey, nil).expectError(t, 404, "not_found")
	d := h.do("DELETE", path, h.adminKey, nil).data(t, 200)["domain"].(map[string]any)
	if d["id"] != float64(id) || d["domain"] != "gone.example" || d["status"] != "deleted" {
		t.Fatalf("delete answer %v", d)
	}

	// Gone everywhere before the answer; its credential revoked, others not.
	h.do("GET", path, h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("GET", path+"/dns-records", h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("POST", path+"/verify", h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("DELETE", path, h.adminKey, nil).expectError(t, 404, "not_found")
	list := h.do("GET", "/api/v1/domains", h.adminKey, nil).data(t, 200)["domains"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["domain"] != "kept.example" {
		t.Fatalf("list after delete %v", list)
	}
	h.do("GET", "/api/v1/domains", scopedKey, nil).expectError(t, 401, "unauthorized")
	h.do("GET", "/api/v1/domains", keptKey, nil).data(t, 200)
	creds := h.do("GET", "/api/v1/credentials", h.adminKey, nil).data(t, 200)["credentials"].([]any)
	if len(creds) != 2 || creds[0].(map[string]any)["label"] != "bootstrap" || creds[1].(map[string]any)["label"] != "kept" {
		t.Fatalf("credentials after delete %v", creds)
	}

	// The name can be added again at once.
	h.do("POST", "/api/v1/domains", h.adminKey, map[string]any{"domain": "gone.example"}).data(t, 201)
}
