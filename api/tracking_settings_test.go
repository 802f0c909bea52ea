package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mailyard/mailyard/internal/store"
)

// Tracking is refused (409 tracking_not_configured) where nothing would
// serve its links: any of it without MAILYARD_TRACKING_URL, and a custom
// domain without MAILYARD_TRACKING_TLS_ADDR as well, whose emails' links
// (the one-click unsubscribe among them) would otherwise lead nowhere.
func TestTrackingNeedsWhatServesIt(t *testing.T) {
	for _, c := range []struct {
		name      string
		env       map[string]string
		body      map[string]any
		refused   bool
		mentioned string
	}{
		{"opens without a URL", nil, map[string]any{"opens": true}, true, "MAILYARD_TRACKING_URL"},
		{"custom domain without a TLS listener", map[string]string{"MAILYARD_TRACKING_URL": "https://t.mailyard.test"},
			map[string]any{"clicks": true, "custom_domain": "track.shop.example"}, true, "MAILYARD_TRACKING_TLS_ADDR"},
		{"clicks without a TLS listener", map[string]string{"MAILYARD_TRACKING_URL": "https://t.mailyard.test"},
			map[string]any{"clicks": true}, false, ""},
		{"custom domain", map[string]string{"MAILYARD_TRACKING_URL": "https://t.mailyard.test", "MAILYARD_TRACKING_TLS_ADDR": "127.0.0.1:0"},
			map[string]any{"clicks": true, "custom_domain": "track.shop.example"}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarnessWith(t, c.env)
			id := h.domainInStatus(h.orgID, "shop.example", store.DomainVerified)
			r := h.do("PATCH", fmt.Sprintf("/api/v1/domains/%d/tracking", id), h.adminKey, c.body)
			if !c.refused {
				r.data(t, 200)
				return
			}
			r.expectError(t, 409, "tracking_not_configured")
			if !strings.Contains(string(r.Raw), c.mentioned) {
				t.Errorf("the 409 does not name %s: %s", c.mentioned, r.Raw)
			}
			if d := h.do("GET", fmt.Sprintf("/api/v1/domains/%d", id), h.adminKey, nil).data(t, 200)["domain"].(map[string]any)["tracking"].(map[string]any); d["clicks"] != false || d["opens"] != false || d["custom_domain"] != nil {
				t.Errorf("tracking changed by a refused PATCH: %v", d)
			}
		})
	}
}
