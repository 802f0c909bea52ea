package api_test

import (
	"testing"

	"github.com/mailyard/mailyard/internal/store"
)

// The recipients may be in to, cc or bcc alone: 1 to 50 in all
// (docs/sending.md). An email to bcc only was refused at body.to, which the
// schema had made required.
func TestSendToBccOnly(t *testing.T) {
	h := newHarness(t)
	domainID := h.domainInStatus(h.orgID, "quiet.example", store.DomainVerified)
	_, sendKey := h.issueCredential(h.adminKey, domainID, "sender", "send")

	body := map[string]any{"from": "news@quiet.example", "bcc": "ada@example.org", "subject": "hi", "text": "hello"}
	sent := h.do("POST", "/api/v1/emails", sendKey, body).data(t, 202)
	id := sent["email"].(map[string]any)["id"].(string)
	email := h.do("GET", "/api/v1/emails/"+id, sendKey, nil).data(t, 200)["email"].(map[string]any)
	if rs := email["recipients"].([]any); len(rs) != 1 || rs[0].(map[string]any)["email"] != "ada@example.org" {
		t.Fatalf("recipients %v", email["recipients"])
	}

	delete(body, "bcc")
	res := h.do("POST", "/api/v1/emails", sendKey, body)
	res.expectError(t, 422, "validation_failed")
	if got := res.detailLocations(); len(got) != 1 || got[0] != "body.to" {
		t.Fatalf("no recipient at all: details at %v", got)
	}
}
