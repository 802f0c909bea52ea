package deploy

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mailyard/mailyard/worker"
)

// composeFile holds the parts of the Compose format that compose.yaml uses.
// Decoding is strict (KnownFields): a key outside this subset, such as a
// misspelled "enviroment", is an error rather than silently ignored.
type composeFile struct {
	Services   map[string]composeService `yaml:"services"`
	Volumes    map[string]any            `yaml:"volumes"`
	Extensions map[string]any            `yaml:",inline"` // x-* anchors
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Restart     string            `yaml:"restart"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   dependsOn         `yaml:"depends_on"`
	// StopGracePeriod is a Compose duration such as "16m" or "1m30s".
	StopGracePeriod string `yaml:"stop_grace_period"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// dependsOn accepts both forms of depends_on: a list of names, or a map of names
// to a condition.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	var list []string
	if n.Decode(&list) == nil {
		for _, s := range list {
			(*d)[s] = "service_started"
		}
		return nil
	}
	var m map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	for k, v := range m {
		(*d)[k] = v.Condition
	}
	return nil
}

// dotEnvSamples stand in for the .env the compose file's header documents.
var dotEnvSamples = map[string]string{
	"POSTGRES_PASSWORD":       "sample",
	"MAILYARD_ENCRYPTION_KEY": secretSamples["MAILYARD_ENCRYPTION_KEY"],
	"MAILYARD_INTERNAL_TOKEN": secretSamples["MAILYARD_INTERNAL_TOKEN"],
}

var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// interpolate replaces ${NAME} and ${NAME:-default} as Compose does, NAME from the
// .env samples; a variable neither documented nor defaulted is an error.
func interpolate(v string) (string, error) {
	var err error
	out := interpolation.ReplaceAllStringFunc(v, func(m string) string {
		parts := interpolation.FindStringSubmatch(m)
		if s, ok := dotEnvSamples[parts[1]]; ok {
			return s
		}
		if strings.Contains(m, "-") {
			return parts[2]
		}
		err = fmt.Errorf("${%s} is neither in the documented .env nor defaulted", parts[1])
		return ""
	})
	return out, err
}

// checkCompose checks the services, that the mailyard processes are built from
// the Dockerfile and get exactly the configuration they read and need, that
// their addresses point at services of the file, and their ports line up.
func checkCompose(data []byte) []error {
	var f composeFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return []error{err}
	}
	var errs []error
	for k := range f.Extensions {
		if !strings.HasPrefix(k, "x-") {
			errs = append(errs, fmt.Errorf("top-level key %q is not services, volumes or an x- extension", k))
		}
	}
	for _, want := range []string{"postgres", "temporal", "migrate", "temporal-setup", "api", "worker", "dns", "inbound", "submission"} {
		if _, ok := f.Services[want]; !ok {
			errs = append(errs, fmt.Errorf("no %s service", want))
		}
	}
	names := make([]string, 0, len(f.Services))
	for name := range f.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	servicesOf := map[string][]string{} // mailyard subcommand → services running it
	temporalOf := map[string]string{}   // service → the Temporal namespace it uses
	hostsOf := map[string]string{}      // service → the public names it gives customers
	for _, name := range names {
		s := f.Services[name]
		where := "service " + name
		for dep := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				errs = append(errs, fmt.Errorf("%s: depends on %q, which is not a service", where, dep))
			}
		}
		for _, v := range s.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if _, ok := f.Volumes[vol]; !ok && !strings.HasPrefix(vol, ".") && !strings.HasPrefix(vol, "/") {
				errs = append(errs, fmt.Errorf("%s: volume %q is not declared", where, vol))
			}
		}
		if s.Build == nil {
			continue // a third-party image (PostgreSQL, Temporal, its UI)
		}
		if filepath.Clean(filepath.Join(s.Build.Context, s.Build.Dockerfile)) != filepath.Clean(filepath.Join("..", "deploy", "Dockerfile")) {
			errs = append(errs, fmt.Errorf("%s: built from %s/%s, not deploy/Dockerfile", where, s.Build.Context, s.Build.Dockerfile))
			continue
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			val, err := interpolate(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %v", where, k, err))
			}
			env[k] = val
		}
		cfg, perrs := checkProcess(where, s.Command, env)
		errs = append(errs, perrs...)
		if cfg == nil {
			continue
		}
		process := s.Command[0]
		servicesOf[process] = append(servicesOf[process], name)
		if process != "migrate" && process != "temporal" {
			hostsOf[name] = fmt.Sprintf("DKIM %s, SPF %s, bounce %s", cfg.DKIMHost, cfg.SPFHost, cfg.BounceHost)
			for _, h := range []string{cfg.DKIMHost, cfg.SPFHost, cfg.BounceHost} {
				if strings.HasSuffix(h, ".test") {
					errs = append(errs, fmt.Errorf("%s: %s is a development default (.test); set MAILYARD_DKIM_HOST, MAILYARD_SPF_HOST and MAILYARD_BOUNCE_HOST for every process", where, h))
				}
			}
		}
		temporalOf[name] = cfg.TemporalNamespace + " at " + cfg.TemporalAddress
		if process == "worker" {
			// Compose sends SIGKILL 10 s after SIGTERM unless told otherwise.
			grace, err := time.ParseDuration(s.StopGracePeriod)
			if s.StopGracePeriod == "" {
				grace, err = 10*time.Second, nil
			}
			if err != nil || grace <= worker.StopTimeout {
				errs = append(errs, fmt.Errorf("%s: stop_grace_period %q is not longer than mailyard worker may take to stop, %s (worker.StopTimeout)", where, s.StopGracePeriod, worker.StopTimeout))
			}
		}
		if (process == "api" || process == "worker" || process == "dns" || process == "inbound" || process == "submission") && s.DependsOn["migrate"] != "service_completed_successfully" {
			errs = append(errs, fmt.Errorf("%s: must wait for migrate to complete (depends_on condition service_completed_successfully): it refuses a schema that is behind", where))
		}
		// The addresses name services of this file.
		if u, err := url.Parse(cfg.DatabaseURL); err == nil && cfg.DatabaseURL != "" && f.Services[u.Hostname()].Image == "" {
			errs = append(errs, fmt.Errorf("%s: the database host %q is not a service of this file", where, u.Hostname()))
		}
		if host, _, _ := strings.Cut(cfg.TemporalAddress, ":"); process != "migrate" && f.Services[host].Image == "" {
			errs = append(errs, fmt.Errorf("%s: the Temporal host %q is not a service of this file", where, host))
		}
		// Published ports reach the port the process listens on.
		var listens []string
		switch process {
		case "api":
			listens = []string{port(cfg.HTTPAddr) + "/tcp"}
		case "dns":
			listens = []string{port(cfg.DNSAddr) + "/udp", port(cfg.DNSAddr) + "/tcp"}
		case "inbound":
			listens = []string{port(cfg.InboundAddr) + "/tcp"}
		case "submission":
			listens = []string{port(cfg.Submission.Addr) + "/tcp"}
			if cfg.Submission.TLSAddr != "" {
				listens = append(listens, port(cfg.Submission.TLSAddr)+"/tcp")
			}
		}
		var published []string
		for _, p := range s.Ports {
			spec, proto, ok := strings.Cut(p, "/")
			if !ok {
				proto = "tcp"
			}
			container := spec[strings.LastIndex(spec, ":")+1:]
			published = append(published, container+"/"+proto)
			if !slices.Contains(listens, container+"/"+proto) {
				errs = append(errs, fmt.Errorf("%s: publishes %s, but the process listens on %v", where, p, listens))
			}
		}
		for _, l := range listens {
			if !slices.Contains(published, l) {
				errs = append(errs, fmt.Errorf("%s: listens on %s but does not publish it", where, l))
			}
		}
	}
	// The API tells customers the records that the workers' mail and the
	// bounce host rely on: every process names the same hosts.
	for _, name := range names {
		if h, ok := hostsOf[name]; ok && h != hostsOf["api"] {
			errs = append(errs, fmt.Errorf("service %s: %s, but the api gives customers %s", name, h, hostsOf["api"]))
		}
	}
	return append(errs, checkComposeSetup(f, servicesOf, temporalOf)...)
}

// checkComposeSetup: one service runs `mailyard temporal setup`, every service
// that starts workflows waits for it to complete, and both use the same
// Temporal namespace on the same server.
func checkComposeSetup(f composeFile, servicesOf map[string][]string, temporalOf map[string]string) []error {
	setups := servicesOf["temporal"]
	if len(setups) != 1 {
		return []error{fmt.Errorf("%d services run mailyard temporal setup, want 1 (%v)", len(setups), setups)}
	}
	setup := setups[0]
	var errs []error
	for _, process := range startsWorkflows {
		for _, name := range servicesOf[process] {
			if f.Services[name].DependsOn[setup] != "service_completed_successfully" {
				errs = append(errs, fmt.Errorf("service %s: must wait for %s to complete (depends_on condition service_completed_successfully): Temporal refuses workflow starts until the search attributes exist", name, setup))
			}
			if temporalOf[name] != temporalOf[setup] {
				errs = append(errs, fmt.Errorf("service %s uses namespace %s, but %s sets up %s", name, temporalOf[name], setup, temporalOf[setup]))
			}
		}
	}
	return errs
}

func TestCompose(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkCompose(data) {
		t.Error(err)
	}
}

func TestComposeChecksCatchMistakes(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good := string(data)
	for name, c := range map[string]struct{ old, new, want string }{
		"misspelled key":   {"    command: [\"worker\"]", "    comand: [\"worker\"]", "field comand not found"},
		"unknown variable": {"    TEMPORAL_ADDRESS: temporal:7233", "    TEMPORAL_HOST: temporal:7233", "TEMPORAL_HOST is not a variable mailyard reads"},
		"missing secret":   {"    MAILYARD_ENCRYPTION_KEY: ${MAILYARD_ENCRYPTION_KEY}\n", "", "MAILYARD_ENCRYPTION_KEY is required by mailyard api"},
		"bad value":        {"MAILYARD_HTTP_ADDR: 0.0.0.0:8080", "MAILYARD_HTTP_ADDR: 8080", "MAILYARD_HTTP_ADDR: \"8080\" is not a host:port"},
		"missing service":  {"  worker:\n", "  workers:\n", "no worker service"},
		"wrong host":       {"@postgres:5432/", "@db:5432/", `the database host "db" is not a service`},
		"short grace":      {"stop_grace_period: 16m", "stop_grace_period: 1m", `stop_grace_period "1m" is not longer than`},
		"no setup wait":    {"    temporal-setup: { condition: service_completed_successfully }\n", "", "must wait for temporal-setup to complete"},
		"other namespace":  {"      TEMPORAL_ADDRESS: temporal:7233\n    depends_on: [temporal]", "      TEMPORAL_ADDRESS: temporal:7233\n      TEMPORAL_NAMESPACE: mailyard\n    depends_on: [temporal]", "but temporal-setup sets up mailyard at temporal:7233"},
	} {
		if !strings.Contains(good, c.old) {
			t.Fatalf("%s: %q is not in compose.yaml any more; update this test", name, c.old)
		}
		errs := checkCompose([]byte(strings.Replace(good, c.old, c.new, 1)))
		if !strings.Contains(fmt.Sprint(errs), c.want) {
			t.Errorf("%s: %v, want %q", name, errs, c.want)
		}
	}
}
