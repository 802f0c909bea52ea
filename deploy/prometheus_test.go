package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// promtool finds promtool (Debian's prometheus package; .ci/run installs it).
// Without it the test is skipped, except under CI (CI set), where it fails, as
// internal/testenv does for PostgreSQL and the Temporal server.
func promtool(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (apt-get install prometheus): the alert rules cannot be checked")
		}
		t.Skip("promtool is not installed (apt-get install prometheus)")
	}
	return bin
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The rules load in Prometheus, and each alert fires on the series of its
// unit tests and stays quiet on the others.
func TestPrometheusRules(t *testing.T) {
	runPromtool(t, "prometheus", "check", "rules", "alerts.yaml")
	runPromtool(t, "prometheus", "test", "rules", "alerts_test.yaml")
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// readYAML decodes path into v; strict refuses fields v does not have (a
// misspelled annotations: or labels: in the rules).
func readYAML(t *testing.T, path string, v any, strict bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// alertsSection is deploy/README.md's "Alerts and dashboard" section.
func alertsSection(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Alerts and dashboard\n")
	if !ok {
		t.Fatal(`deploy/README.md has no "## Alerts and dashboard" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// Each alert says what happened (summary, description), how bad it is
// (severity), where the operator reads what to do (a runbook naming a
// subsection of deploy/README.md that exists), waits long enough not to
// flap, and has a unit test that fires it and one that does not.
func TestAlertRulesShape(t *testing.T) {
	var rules ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rules, true)
	var tests ruleTests
	readYAML(t, "prometheus/alerts_test.yaml", &tests, false)
	section := alertsSection(t)

	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s has a rule that is not an alert: %q", g.Name, r.Expr)
				continue
			}
			if slices.Contains(names, r.Alert) {
				t.Errorf("%s: defined twice", r.Alert)
			}
			names = append(names, r.Alert)
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if want := `deploy/README.md "Alerts and dashboard" > ` + r.Alert; r.Annotations["runbook"] != want {
				t.Errorf("%s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
			if !strings.Contains(section, "\n### "+r.Alert+"\n") {
				t.Errorf(`%s: deploy/README.md "Alerts and dashboard" has no "### %s" subsection`, r.Alert, r.Alert)
			}
			// Shorter waits page on a single bad scrape or a restart.
			if d, err := time.ParseDuration(r.For); err != nil || d < 2*time.Minute {
				t.Errorf("%s: for %q, want at least 2m", r.Alert, r.For)
			}
			if !fires[r.Alert] {
				t.Errorf("%s: alerts_test.yaml has no case where it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: alerts_test.yaml has no case where it does not fire", r.Alert)
			}
		}
	}
	for name := range fires {
		if !slices.Contains(names, name) {
			t.Errorf("alerts_test.yaml tests %s, which alerts.yaml does not define", name)
		}
	}
	// Every subsection of the README's section is an alert: none is left
	// behind by a rename.
	for _, m := range regexp.MustCompile(`(?m)^### (\S+)$`).FindAllStringSubmatch(section, -1) {
		if strings.HasPrefix(m[1], "Mailyard") && !slices.Contains(names, m[1]) {
			t.Errorf(`deploy/README.md "Alerts and dashboard" describes %s, which alerts.yaml does not define`, m[1])
		}
	}
}

type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	SchemaVersion int              `json:"schemaVersion"`
	UID           string           `json:"uid"`
	Panels        []dashboardPanel `json:"panels"`
}

type dashboardPanel struct {
	ID         int `json:"id"`
	Type       string
	Title      string
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // of a collapsed row
}

// grafanaIntervals stand in for Grafana's interval variables so that promtool
// can parse the dashboard's queries.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// The dashboard is importable (schema 39, a DS_PROMETHEUS input every panel
// and query uses), its panels do not overlap, and each query is PromQL that
// Prometheus parses: the queries become recording rules for `promtool check
// rules`. Which metric names the queries may use is checked against real
// scrapes by internal/e2e/dashboard_test.go.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/mailyard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want at least 39", d.SchemaVersion)
	}
	if d.UID == "" {
		t.Error("no uid: links to the dashboard would change at each import")
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs = %+v, want the one Prometheus input DS_PROMETHEUS", d.Inputs)
	}
	var all []dashboardPanel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries := 0
	for _, p := range all {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap", other, p.Title)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource %+v, want uid ${DS_PROMETHEUS}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q, query %s: empty", p.Title, q.RefID)
				continue
			}
			queries++
			expr, _ := json.Marshal(grafanaIntervals.Replace(q.Expr))
			fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", queries, expr)
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, ".", "check", "rules", file)
}
