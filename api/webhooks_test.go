package api_test

import (
	"fmt"
	"strings"
	"testing"
)

func (h *harness) createWebhook(key, url string, types ...string) (id int64, secret string) {
	h.t.Helper()
	d := h.do("POST", "/api/v1/webhooks", key, map[string]any{"url": url, "event_types": types}).data(h.t, 201)
	return int64(d["webhook"].(map[string]any)["id"].(float64)), d["signing_secret"].(string)
}

func TestCreateListGetDeleteWebhook(t *testing.T) {
	h := newHarness(t)
	r := h.do("POST", "/api/v1/webhooks", h.adminKey, map[string]any{"url": "https://hooks.example.com/in?token=abc", "event_types": []string{"delivered", "bounced"}})
	d := r.data(t, 201)
	w := d["webhook"].(map[string]any)
	secret := d["signing_secret"].(string)
	if w["status"] != "enabled" || w["url"] != "https://hooks.example.com/in?token=abc" || fmt.Sprint(w["event_types"]) != "[delivered bounced]" ||
		!strings.HasSuffix(w["created_at"].(string), "Z") || !strings.HasPrefix(secret, "whsec_") || len(secret) != len("whsec_")+44 {
		t.Fatalf("created %s", r.Raw)
	}
	id := int64(w["id"].(float64))

	// The secret is stored encrypted, bound to its row, and shown again.
	row, err := h.store.WebhookInOrganization(t.Context(), h.orgID, id)
	if err != nil || strings.Contains(string(row.SecretEnc), secret[6:]) || len(row.SecretEnc) == 0 {
		t.Fatalf("stored secret %q (%v)", row.SecretEnc, err)
	}
	if got := h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/secret", id), h.adminKey, nil).data(t, 200); got["signing_secret"] != secret {
		t.Fatalf("secret shown again %v", got)
	}

	list := h.do("GET", "/api/v1/webhooks", h.adminKey, nil).data(t, 200)["webhooks"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["id"].(float64) != float64(id) {
		t.Fatalf("list %v", list)
	}
	h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d", id), h.adminKey, nil).data(t, 200)

	// Another organization's key sees nothing of it: 404, never 403.
	_, otherKey := h.newOrg("other")
	for _, p := range []struct{ method, path string }{
		{"GET", "/api/v1/webhooks/%d"}, {"DELETE", "/api/v1/webhooks/%d"}, {"GET", "/api/v1/webhooks/%d/secret"},
		{"POST", "/api/v1/webhooks/%d/test"}, {"GET", "/api/v1/webhooks/%d/deliveries"},
		{"POST", "/api/v1/webhooks/%d/deliveries/0193a5c4-2f00-7000-8000-000000000001/retry"},
	} {
		h.do(p.method, fmt.Sprintf(p.path, id), otherKey, nil).expectError(t, 404, "not_found")
	}
	if list := h.do("GET", "/api/v1/webhooks", otherKey, nil).data(t, 200)["webhooks"].([]any); len(list) != 0 {
		t.Fatalf("other organization lists %v", list)
	}

	del := h.do("DELETE", fmt.Sprintf("/api/v1/webhooks/%d", id), h.adminKey, nil).data(t, 200)
	if del["webhook"].(map[string]any)["id"].(float64) != float64(id) {
		t.Fatalf("delete answered %v", del)
	}
	h.do("DELETE", fmt.Sprintf("/api/v1/webhooks/%d", id), h.adminKey, nil).expectError(t, 404, "not_found")
	h.do("GET", fmt.Sprintf("/api/v1/webhooks/%d/secret", id), h.adminKey, nil).expectError(t, 404, "not_found")
}

func TestCreateWebhookValidation(t *testing.T) {
	h := newHarness(t)
	long := "https://hooks.example.com/" + strings.Repeat("a", 2048)
	cases := []struct {
		name     string
		body     any
		location string
	}{
		{"http", map[string]any{"url": "http://hooks.example.com/", "event_types": []string{"delivered"}}, "body.url"},
		{"too long", map[string]any{"url": long, "event_types": []string{"delivered"}}, "body.url"},
		{"user-info", map[string]any{"url": "https://user:pw@hooks.example.com/", "event_types": []string{"delivered"}}, "body.url"},
		{"fragment", map[string]any{"url": "https://hooks.example.com/#x", "event_types": []string{"delivered"}}, "body.url"},
		{"localhost", map[string]any{"url": "https://localhost/", "event_types": []string{"delivered"}}, "body.url"},
		{"loopback", map[string]any{"url": "https://127.0.0.1/", "event_types": []string{"delivered"}}, "body.url"},
		{"metadata", map[string]any{"url": "https://169.254.169.254/latest", "event_types": []string{"delivered"}}, "body.url"},
		{"private", map[string]any{"url": "https://10.1.2.3/", "event_types": []string{"delivered"}}, "body.url"},
		{"mapped", map[string]any{"url": "https://[::ffff:127.0.0.1]/", "event_types": []string{"delivered"}}, "body.url"},
		{"decimal loopback", map[string]any{"url": "https://2130706433/", "event_types": []string{"delivered"}}, "body.url"},
		{"not a URL", map[string]any{"url": "hooks", "event_types": []string{"delivered"}}, "body.url"},
		{"no types", map[string]any{"url": "https://hooks.example.com/", "event_types": []string{}}, "body.event_types"},
		{"unknown type", map[string]any{"url": "https://hooks.example.com/", "event_types": []string{"sent"}}, "body.event_types[0]"},
		{"duplicate type", map[string]any{"url": "https://hooks.example.com/", "event_types": []string{"opened", "opened"}}, "body.event_types"},
		{"missing types", map[string]any{"url": "https://hooks.example.com/"}, "body.event_types"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/api/v1/webhooks", h.adminKey, c.body)
			r.expectError(t, 422, "validation_failed")
			if locs := r.detailLocations(); len(locs) == 0 || locs[0] != c.location {
				t.Fatalf("details at %v, want %s first: %s", locs, c.location, r.Raw)
			}
		})
	}
	if list := h.do("GET", "/api/v1/webhooks", h.adminKey, nil).data(t, 200)["webhooks"].([]any); len(list) != 0 {
		t.Fatalf("refused webhooks were stored: %v", list)
	}
}

func TestWebhookLimitPerOrganization(t *testing.T) {
	h := newHarness(t)
	var first int64
	for i := range 20 {
		id, _ := h.createWebhook(h.adminKey, fmt.Sprintf("https://hooks.example.com/%d", i), "delivered")
		if i == 0 {
			first = id
		}
	}
	h.do("POST", "/api/v1/webhooks", h.adminKey, map[string]any{"url": "https://hooks.example.com/21", "event_types": []string{"delivered"}}).
		expectError(t, 409, "webhook_limit_reached")
	h.do("DELETE", fmt.Sprintf("/api/v1/webhooks/%d", first), h.adminKey, nil).data(t, 200)
	h.createWebhook(h.adminKey, "https://hooks.example.com/21", "delivered")
	// The limit is per organization.
	_, otherKey := h.newOrg("other")
	h.createWebhook(otherKey, "https://hooks.example.com/other", "delivered")
}
