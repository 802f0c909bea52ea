package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The alert rules and the dashboard of deploy/ may only name metrics that the
// processes really export: a renamed metric or a typo would otherwise leave an
// alert that never fires and an empty panel. checkMonitoringMetrics compares
// the names in their expressions with the names in real scrapes; the test that
// calls it (TestSendingMetrics) must have made enough traffic for the families
// that appear only once used (histograms by label, the SDK's schedule-to-start
// latencies, verification checks, DNS queries).

const (
	alertRulesFile = "../../deploy/prometheus/alerts.yaml"
	dashboardFile  = "../../deploy/grafana/mailyard.json"
)

// pendingMetrics are names the rules or the dashboard use before the change
// that exports them is merged into this branch. Each entry must go once the
// metric is exported: checkMonitoringMetrics fails while a pending name is
// found in the scrapes, so the list cannot go stale.
var pendingMetrics = []string{}

// prometheusMetrics are made by Prometheus itself for each target, not by the
// processes: `up` is 0 when a scrape fails.
var prometheusMetrics = []string{"up"}

// monitoringExpressions returns every PromQL expression of the alert rules and
// of the dashboard's queries, each with where it comes from.
func monitoringExpressions(t *testing.T) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	data, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("%s: %v", alertRulesFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert+r.Record] = r.Expr
		}
	}
	data, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string
		}
		Panels []json.RawMessage
	}
	var dash struct{ Panels []panel }
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	all := dash.Panels
	for _, p := range dash.Panels {
		for _, raw := range p.Panels {
			var inner panel
			if err := json.Unmarshal(raw, &inner); err != nil {
				t.Fatal(err)
			}
			all = append(all, inner)
		}
	}
	for _, p := range all {
		for _, q := range p.Targets {
			exprs["panel "+p.Title+" "+q.RefID] = q.Expr
		}
	}
	if len(exprs) == 0 {
		t.Fatal("no expressions found in deploy/")
	}
	return exprs
}

var (
	// Parts of PromQL that hold no metric name: strings, label matchers,
	// ranges and subqueries, grouping label lists, Grafana variables.
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	grafanaVars    = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	// A number (with a duration unit, as after offset) or an identifier.
	promqlTokens = regexp.MustCompile(`[0-9][0-9A-Za-z_.]*|[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
)

// promqlKeywords are identifiers that are not metric names when not called as
// functions.
var promqlKeywords = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "inf", "nan", "atan2"}

// metricNames returns the metric names an expression selects: the identifiers
// left once strings, label matchers, ranges, grouping lists and Grafana
// variables are removed, without function calls and keywords.
func metricNames(expr string) []string {
	expr = promqlStrings.ReplaceAllString(expr, " ")
	expr = grafanaVars.ReplaceAllString(expr, " ")
	expr = promqlMatchers.ReplaceAllString(expr, " ")
	expr = promqlRanges.ReplaceAllString(expr, " ")
	expr = promqlGrouping.ReplaceAllString(expr, " ")
	var names []string
	for _, m := range promqlTokens.FindAllStringSubmatch(expr, -1) {
		tok := m[0]
		if tok[0] >= '0' && tok[0] <= '9' || m[1] != "" || slices.Contains(promqlKeywords, strings.ToLower(tok)) {
			continue
		}
		if !slices.Contains(names, tok) {
			names = append(names, tok)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum(increase(mailyard_webhook_attempts_total{outcome="retryable"}[15m])) / sum(increase(mailyard_webhook_attempts_total[15m])) > 0.5
		 and sum(increase(mailyard_webhook_attempts_total[15m])) >= 20`: {"mailyard_webhook_attempts_total"},
		`histogram_quantile(0.95, sum by (task_queue, le) (rate(temporal_activity_schedule_to_start_latency_seconds_bucket[$__rate_interval])))`: {"temporal_activity_schedule_to_start_latency_seconds_bucket"},
		`sum(rate(a_total{status=~"5.."}[5m])) by (job) / on (job) group_left (x) b offset 1h`:                                                   {"a_total", "b"},
		`up{job=~"mailyard-.+"} == 0`:                                      {"up"},
		`label_replace(c, "dst", "$1", "src", "(.*)") * 1e3`:               {"c"},
		`sum by (qtype, rcode) (rate(d[${__rate_interval}])) or vector(0)`: {"d"},
		`max_over_time(e[1h:5m]) unless f and bool g`:                      {"e", "f", "g"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// exportedMetrics returns the metric names of scrapes: each family of a
// `# TYPE` line, and for histograms and summaries the series names Prometheus
// stores (_bucket, _sum, _count).
func exportedMetrics(scrapes map[string]string) map[string]bool {
	names := map[string]bool{}
	for _, scrape := range scrapes {
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(scrape, -1) {
			names[m[1]] = true
			switch m[2] {
			case "histogram":
				names[m[1]+"_bucket"], names[m[1]+"_sum"], names[m[1]+"_count"] = true, true, true
			case "summary":
				names[m[1]+"_sum"], names[m[1]+"_count"] = true, true
			}
		}
	}
	return names
}

// checkMonitoringMetrics fails the test for each metric an alert or a panel
// of deploy/ names that no scrape has, and for each pending name that a
// scrape has (remove it from pendingMetrics).
func checkMonitoringMetrics(t *testing.T, scrapes map[string]string) {
	t.Helper()
	exported := exportedMetrics(scrapes)
	for _, name := range pendingMetrics {
		if exported[name] {
			t.Errorf("%s is exported now: remove it from pendingMetrics (internal/e2e/dashboard_test.go)", name)
		}
	}
	missing := map[string][]string{}
	for where, expr := range monitoringExpressions(t) {
		for _, name := range metricNames(expr) {
			if !exported[name] && !slices.Contains(prometheusMetrics, name) && !slices.Contains(pendingMetrics, name) {
				missing[name] = append(missing[name], where)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(missing)) {
		slices.Sort(missing[name])
		t.Errorf("%s is used by deploy/ (%s) but no process exports it", name, strings.Join(missing[name], "; "))
	}
}
