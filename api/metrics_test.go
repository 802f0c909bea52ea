package api_test

import (
	"net/http/httptest"
	"testing"

	"github.com/mailyard/mailyard/internal/testenv"
)

// scrapeMetrics fetches /metrics from the internal listener with no token.
func scrapeMetrics(t *testing.T, internalURL string) string {
	t.Helper()
	return testenv.Scrape(t, internalURL+"/metrics")
}

// Requests on both listeners are counted by operation and status, with their
// latency, and the internal listener serves the metrics without a token.
func TestRequestMetrics(t *testing.T) {
	h := newHarness(t)
	internal := httptest.NewServer(h.api.InternalHandler())
	defer internal.Close()

	series := []string{
		`mailyard_http_requests_total{operation="list-domains",status="200"}`,
		`mailyard_http_requests_total{operation="list-domains",status="401"}`,
		`mailyard_http_requests_total{operation="other",status="404"}`,
		`mailyard_http_requests_total{operation="ingest-event",status="401"}`,
		`mailyard_http_request_duration_seconds_count{operation="list-domains"}`,
	}
	before := scrapeMetrics(t, internal.URL)
	if r := h.do("GET", "/api/v1/domains", h.adminKey, nil); r.Status != 200 {
		t.Fatalf("list domains: %d", r.Status)
	}
	if r := h.do("GET", "/api/v1/domains", "", nil); r.Status != 401 {
		t.Fatalf("list domains without a key: %d", r.Status)
	}
	if r := h.do("GET", "/api/v1/no-such-thing", h.adminKey, nil); r.Status != 404 {
		t.Fatalf("unknown path: %d", r.Status)
	}
	if r := h.doAt(internal.URL, "POST", "/internal/v1/events", "", map[string]any{}, nil); r.Status != 401 {
		t.Fatalf("ingest without the internal token: %d", r.Status)
	}
	after := scrapeMetrics(t, internal.URL)
	for i, want := range []float64{1, 1, 1, 1, 2} {
		if got := testenv.Sample(t, after, series[i]) - testenv.Sample(t, before, series[i]); got != want {
			t.Errorf("%s went up by %v, want %v", series[i], got, want)
		}
	}
	// Scrapes are not API traffic, and the public listener has no /metrics.
	other := `mailyard_http_requests_total{operation="other",status="200"}`
	if testenv.Sample(t, after, other) != testenv.Sample(t, before, other) {
		t.Error("a scrape was counted as an API request")
	}
	if r := h.do("GET", "/metrics", "", nil); r.Status != 404 {
		t.Errorf("GET /metrics on the public listener: %d, want 404", r.Status)
	}
	testenv.CheckMetrics(t, []byte(after))
}
