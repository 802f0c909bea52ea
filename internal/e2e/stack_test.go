package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/mailyard/mailyard/internal/temporaldev"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testEncryptionKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// stack is Mailyard running as separate api, worker and dns processes.
type stack struct {
	t           *testing.T
	env         []string // what every process gets; api listeners are added per process
	apiURL      string   // the first api process
	apiURLs     []string // every api process's public listener
	internal    []string // every api process's internal listener (host:port)
	workers     []*testenv.Process
	dnsAddr     string
	temporal    string
	namespace   string
	adminKey    string
	customer    *testenv.DNSZone
	temporalC   client.Client
	databaseURL string
	// metricsURL is each process's /metrics: the API's internal listener,
	// and MAILYARD_METRICS_ADDR of worker and dns.
	metricsURL map[string]string
}

// topology is what startTopology runs.
type topology struct {
	// temporal is a cluster's frontend address: namespace and search
	// attributes are set up with `mailyard temporal setup`, as an operator
	// does. Empty: a dev server of the test's own, which has them.
	temporal  string
	namespace string // TEMPORAL_NAMESPACE; empty: default
	apis      int    // api processes, each with its own listeners
	workers   int
	env       []string // added to every process's environment
}

func startStack(t *testing.T, extraEnv ...string) *stack {
	return startTopology(t, topology{apis: 1, workers: 1, env: extraEnv})
}

// startTopology migrates a fresh database, creates the organization acme, and
// starts the processes: apis × api, workers × worker, one dns.
func startTopology(t *testing.T, top topology) *stack {
	t.Helper()
	cluster := top.temporal != ""
	if !cluster {
		// Its own Temporal server: the rotation workflows a test leaves running
		// must not be joined by the next test's domain with the same id.
		top.temporal = testenv.OwnTemporal(t)
	}
	if top.namespace == "" {
		top.namespace = "default"
	}
	s := &stack{t: t, customer: testenv.StartDNSZone(t), temporal: top.temporal, namespace: top.namespace, databaseURL: testenv.PostgresURL(t)}
	s.dnsAddr = testenv.FreeAddr(t)
	s.env = append([]string{
		"MAILYARD_DATABASE_URL=" + s.databaseURL,
		"TEMPORAL_ADDRESS=" + s.temporal,
		"TEMPORAL_NAMESPACE=" + s.namespace,
		"MAILYARD_ENCRYPTION_KEY=" + testEncryptionKey,
		"MAILYARD_INTERNAL_TOKEN=e2e-internal-token",
		"MAILYARD_DNS_ADDR=" + s.dnsAddr,
		"MAILYARD_DNS_RESOLVER=" + s.customer.Addr,
	}, top.env...)

	if cluster {
		s.run("temporal", "setup")
	}
	s.run("migrate")
	out := s.run("org", "create", "acme")
	key := regexp.MustCompile(`myk_[0-9A-Za-z]+`).FindString(out)
	if key == "" {
		t.Fatalf("org create printed no key: %s", out)
	}
	s.adminKey = key

	// Every process gets listeners of its own; metricsURL names the first of
	// each kind (the API serves /metrics on its internal listener).
	var listeners []string
	s.metricsURL = map[string]string{}
	for range top.apis {
		httpAddr, internalAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
		s.apiURLs = append(s.apiURLs, "http://"+httpAddr)
		s.internal = append(s.internal, internalAddr)
		listeners = append(listeners, httpAddr, internalAddr)
		testenv.Start(t, slices.Concat(s.env, []string{"MAILYARD_HTTP_ADDR=" + httpAddr, "MAILYARD_INTERNAL_ADDR=" + internalAddr}), "api")
	}
	s.apiURL = s.apiURLs[0]
	s.metricsURL["api"] = "http://" + s.internal[0] + "/metrics"
	for i := range top.workers {
		metrics := testenv.FreeAddr(t)
		if i == 0 {
			s.metricsURL["worker"] = "http://" + metrics + "/metrics"
		}
		s.workers = append(s.workers, testenv.Start(t, slices.Concat(s.env, []string{"MAILYARD_METRICS_ADDR=" + metrics}), "worker"))
	}
	dnsMetrics := testenv.FreeAddr(t)
	s.metricsURL["dns"] = "http://" + dnsMetrics + "/metrics"
	testenv.Start(t, slices.Concat(s.env, []string{"MAILYARD_METRICS_ADDR=" + dnsMetrics}), "dns")
	for _, addr := range append(listeners, s.dnsAddr) {
		testenv.WaitListening(t, addr, 30*time.Second)
	}

	c, err := client.Dial(client.Options{HostPort: s.temporal, Namespace: s.namespace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s.temporalC = c
	return s
}

// on is the stack seen through its i-th api process: call goes there.
func (s *stack) on(i int) *stack {
	c := *s
	c.apiURL = s.apiURLs[i]
	return &c
}

// run runs a short-lived subcommand to completion.
func (s *stack) run(args ...string) string {
	s.t.Helper()
	cmd := exec.Command(testenv.Binary(s.t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, s.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("mailyard %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// call sends an API request with the admin key and decodes the envelope's data.
func (s *stack) call(method, path string, body any, wantStatus int) map[string]any {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.apiURL+path, rd)
	req.Header.Set("Authorization", "Bearer "+s.adminKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != wantStatus {
		s.t.Fatalf("%s %s: status %d, want %d: %s", method, path, res.StatusCode, wantStatus, raw)
	}
	var env struct {
		Status string         `json:"status"`
		Data   map[string]any `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		s.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
	}
	return env.Data
}

// historyJSON exports a workflow run's history with the Temporal CLI, in the
// format the replayer reads.
func (s *stack) historyJSON(workflowID, runID string) []byte {
	s.t.Helper()
	bin, err := temporaldev.FindBinary()
	if err != nil {
		s.t.Fatal(err)
	}
	args := []string{"workflow", "show", "--address", s.temporal, "--workflow-id", workflowID, "--output", "json"}
	if runID != "" {
		args = append(args, "--run-id", runID)
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		s.t.Fatalf("temporal workflow show %s: %v", workflowID, err)
	}
	return out
}

// recordHistory keeps a history under a workflow package's testdata when
// MAILYARD_RECORD_HISTORIES is set, for the replay tests.
func recordHistory(t *testing.T, path string, history []byte) {
	if os.Getenv("MAILYARD_RECORD_HISTORIES") == "" {
		return
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, history, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s", path)
}

func contains(haystack []byte, needles ...string) string {
	for _, n := range needles {
		if n != "" && bytes.Contains(haystack, []byte(n)) {
			return n
		}
	}
	return ""
}
