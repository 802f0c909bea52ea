package api_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/api/serviceerror"

	"github.com/mailyard/mailyard/workflows/onboarding"
)

func TestAddDomainAnswersTheFourRecords(t *testing.T) {
	h := newHarness(t)
	d := h.do("POST", "/api/v1/domains", h.adminKey, map[string]any{"domain": "  Bücher.Example. "}).data(t, 201)
	dom := d["domain"].(map[string]any)
	if dom["domain"] != "xn--bcher-kva.example" || dom["status"] != "pending" || dom["mailfrom_subdomain"] != "mail.xn--bcher-kva.example" {
		t.Fatalf("domain %v", dom)
	}
	recs := d["dns_records"].([]any)
	if len(recs) != 4 {
		t.Fatalf("records %v", recs)
	}
	token := strings.TrimSuffix(recs[0].(map[string]any)["value"].(string), "-1.dkim.mailyard.test")
	if len(token) != 32 || strings.Trim(token, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		t.Fatalf("token %q", token)
	}
	want := [][4]string{
		{"DKIM CNAME 1", "CNAME", token + "-1._domainkey.xn--bcher-kva.example", token + "-1.dkim.mailyard.test"},
		{"DKIM CNAME 2", "CNAME", token + "-2._domainkey.xn--bcher-kva.example", token + "-2.dkim.mailyard.test"},
		{"SPF", "TXT", "mail.xn--bcher-kva.example", "v=spf1 include:spf.mailyard.test ~all"},
		{"MX (bounce routing)", "MX", "mail.xn--bcher-kva.example", "10 bounces.mailyard.test"},
	}
	for i, w := range want {
		r := recs[i].(map[string]any)
		if r["purpose"] != w[0] || r["type"] != w[1] || r["name"] != w[2] || r["value"] != w[3] {
			t.Errorf("record %d = %v, want %v", i, r, w)
		}
	}

	// Listed, readable, and a repeat is a conflict.
	if list := h.do("GET", "/api/v1/domains", h.adminKey, nil).data(t, 200)["domains"].([]any); len(list) != 1 {
		t.Fatalf("list %v", list)
	}
	id := int64(dom["id"].(float64))
	state := h.do("GET", fmt.Sprintf("/api/v1/domains/%d/dns-records", id), h.adminKey, nil).data(t, 200)
	if state["domain"].(map[string]any)["last_checked_at"] != nil {
		t.Fatalf("checked before any check: %v", state)
	}
	for _, r := range state["dns_records"].([]any) {
		rec := r.(map[string]any)
		if rec["status"] != "pending" || rec["checked_at"] != nil || len(rec["observed"].([]any)) != 0 {
			t.Fatalf("fresh record %v", rec)
		}
	}
	h.do("POST", "/api/v1/domains", h.adminKey, map[string]any{"domain": "xn--bcher-kva.example"}).expectError(t, 409, "domain_exists")

	// Another organization may add the same domain, with its own token.
	_, otherKey := h.newOrg("other")
	o := h.do("POST", "/api/v1/domains", otherKey, map[string]any{"domain": "bücher.example"}).data(t, 201)
	if o["dns_records"].([]any)[0].(map[string]any)["value"] == recs[0].(map[string]any)["value"] {
		t.Fatal("two organizations share a DKIM token")
	}
	// ...and cannot see this one's.
	h.do("GET", fmt.Sprintf("/api/v1/domains/%d/dns-records", id), otherKey, nil).expectError(t, 404, "not_found")
	h.do("POST", fmt.Sprintf("/api/v1/domains/%d/verify", id), otherKey, nil).expectError(t, 404, "not_found")
	h.do("GET", "/api/v1/domains/999999/dns-records", h.adminKey, nil).expectError(t, 404, "not_found")
}

func TestAddDomainCustomMailFrom(t *testing.T) {
	h := newHarness(t)
	d := h.do("POST", "/api/v1/domains", h.adminKey, map[string]any{"domain": "example.org", "mailfrom_subdomain": "Bounce.Example.org"}).data(t, 201)
	recs := d["dns_records"].([]any)
	if recs[2].(map[string]any)["name"] != "bounce.example.org" || recs[3].(map[string]any)["name"] != "bounce.example.org" {
		t.Fatalf("records %v", recs)
	}
}

func TestAddDomainRejectsBadInput(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		body     string
		status   int
		code     string
		location string
	}{
		{`{"domain":"com"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"co.uk"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"github.io"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"localhost"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"192.0.2.1"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"[::1]"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"bad_label.example"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"-bad.example"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"` + strings.Repeat("a", 64) + `.example"}`, 422, "validation_failed", "body.domain"},
		{`{"domain":""}`, 422, "validation_failed", "body.domain"},
		// A valid name, but too long for its DKIM records' names (46 more).
		{`{"domain":"` + longDomain(220) + `"}`, 422, "validation_failed", "body.domain"},
		{`{}`, 422, "validation_failed", "body.domain"},
		{`{"domain":"example.net","mailfrom_subdomain":"example.net"}`, 422, "validation_failed", "body.mailfrom_subdomain"},
		{`{"domain":"example.net","mailfrom_subdomain":"mail.other.net"}`, 422, "validation_failed", "body.mailfrom_subdomain"},
		{`{"domain":"example.net","extra":1}`, 422, "validation_failed", "body"},
		{`{"domain":`, 400, "bad_request", ""},
		{`not json`, 400, "bad_request", ""},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			r := h.do("POST", "/api/v1/domains", h.adminKey, c.body)
			r.expectError(t, c.status, c.code)
			if c.location != "" && !strings.Contains(string(r.Raw), `"location":"`+c.location) {
				t.Fatalf("no detail at %s: %s", c.location, r.Raw)
			}
		})
	}
	// Nothing was half-written.
	if list := h.do("GET", "/api/v1/domains", h.adminKey, nil).data(t, 200)["domains"].([]any); len(list) != 0 {
		t.Fatalf("bad input left domains behind: %v", list)
	}
}

func TestBodyOver64KiB(t *testing.T) {
	h := newHarness(t)
	big := `{"domain":"example.com","mailfrom_subdomain":"` + strings.Repeat("a", 70<<10) + `"}`
	h.do("POST", "/api/v1/domains", h.adminKey, big).expectError(t, 413, "payload_too_large")
}

// longDomain is a valid domain name of n characters (labels of 50).
func longDomain(n int) string {
	head := strings.Repeat(strings.Repeat("a", 50)+".", n/50+1)[:n-len(".example")]
	if strings.HasSuffix(head, ".") {
		head = head[:len(head)-1] + "a"
	}
	return head + ".example"
}

// A domain whose onboarding start only looked failed (the run was created,
// its answer lost) is answered 201 and kept: its run may already have
// published the DKIM keys, which taking the domain back would leave in the
// zone with nothing to remove them. A start that Temporal refused takes
// the domain back, as before, so the client can simply retry.
func TestAddDomainWhoseStartAnswerWasLost(t *testing.T) {
	h := newHarness(t)
	lost := h.doAt(h.serverThrough(loseStartAnswers, 0).URL, "POST", "/api/v1/domains", h.adminKey, map[string]any{"domain": "lost.example"}, nil).data(t, 201)
	id := int64(lost["domain"].(map[string]any)["id"].(float64))
	h.do("GET", fmt.Sprintf("/api/v1/domains/%d", id), h.adminKey, nil).data(t, 200)
	if exists, err := workflowExists(h, onboarding.WorkflowID(id)); err != nil || !exists {
		t.Fatalf("the kept domain's onboarding run: %v, %v", exists, err)
	}

	if res := h.doAt(h.serverThrough(beforeStarts(refuseStart), 0).URL, "POST", "/api/v1/domains", h.adminKey, map[string]any{"domain": "refused.example"}, nil); res.Status < 500 {
		t.Fatalf("a domain whose onboarding was refused: %d %s", res.Status, res.Raw)
	}
	h.do("POST", "/api/v1/domains", h.adminKey, map[string]any{"domain": "refused.example"}).data(t, 201)
}

// workflowExists says whether Temporal has a run of the workflow id.
func workflowExists(h *harness, workflowID string) (bool, error) {
	_, err := h.temporal.DescribeWorkflowExecution(context.Background(), workflowID, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return false, nil
	}
	return err == nil, err
}
