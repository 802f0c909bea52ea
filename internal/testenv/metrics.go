package testenv

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/mailyard/mailyard/internal/metrics"
)

// CheckMetrics runs `promtool check metrics` (Debian's prometheus package;
// .ci/run installs it) on a scrape and fails the test on any problem it
// reports: a name against the conventions, a missing help text, a counter
// without _total, text it cannot parse.
func CheckMetrics(t testing.TB, scrape []byte) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed (apt-get install prometheus): the metrics lint cannot run")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// Scrape fetches url (a /metrics endpoint) as Prometheus does.
func Scrape(t testing.TB, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, res.StatusCode, body)
	}
	return string(body)
}

// ScrapeProcess scrapes this test process's own registry over HTTP.
func ScrapeProcess(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(metrics.Handler())
	defer srv.Close()
	return Scrape(t, srv.URL)
}

// Sample is the value of one series, written as in the scrape (name and
// labels in their order there), or 0 when the scrape does not have it.
func Sample(t testing.TB, scrape, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}
