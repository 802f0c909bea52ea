package e2e

import (
	"bytes"
	"encoding/json"
	"flag"
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

func TestMain(m *testing.M) {
	// Three tests at a time unless -parallel says otherwise: one heavy test
	// and two light ones (doc.go), where a slot may also hold a heavy test
	// waiting for its turn.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "3")
	}
	testenv.Main(m)
}

// heavySlot is held by the one heavy test running.
var heavySlot = make(chan struct{}, 1)

// heavy marks a test that loads the cores (hundreds of deliveries or emails,
// several processes, a Temporal server of its own) or whose checks need
// workflow tasks answered in time (an attempt that lasts 15 s): it runs beside
// light tests, never beside another heavy one. It calls t.Parallel.
func heavy(t *testing.T) {
	t.Parallel()
	heavySlot <- struct{}{}
	t.Cleanup(func() { <-heavySlot })
}

const testEncryptionKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// stack is Mailyard running as separate api, worker and dns processes.
type stack struct {
	t           *testing.T
	env         []string // what every process gets; the first api's listeners
	apiURL      string
	httpAddr    string
	apiURLs     []string // every api process's public listener
	internal    []string // every api process's internal listener, host:port
	dnsAddr     string
	temporal    string
	namespace   string
	adminKey    string
	customer    *testenv.DNSZone
	temporalC   client.Client
	databaseURL string
	// api is the first api process (nil when the stack started none, or
	// runs it in the test process).
	apiProc *testenv.Process
	// worker is the worker process (nil when the worker runs in the test
	// process); a test may kill it and start another.
	worker *testenv.Process
	// dns is the `mailyard dns` process.
	dns *testenv.Process
	// metricsURL is each process's /metrics: the API's internal listener,
	// and MAILYARD_METRICS_ADDR of worker and dns.
	metricsURL map[string]string
	// metricsEnv is the MAILYARD_METRICS_ADDR setting of worker and dns.
	metricsEnv map[string]string
}

// topology is what startStack runs; its zero value is one api, one worker
// and one dns process on a Temporal dev server and a database of the test's
// own.
type topology struct {
	// temporal is a cluster's frontend address: namespace and search
	// attributes are set up with `mailyard temporal setup`, as an operator
	// does. Empty: a dev server of the test's own, which has them.
	temporal string
	// sharedTemporal: the dev server the package's tests share
	// (testenv.Temporal) instead of one of the test's own.
	sharedTemporal bool
	namespace      string   // TEMPORAL_NAMESPACE; empty: default
	apis           int      // api processes, each with listeners of its own; 0: one
	workers        int      // worker processes, each with a metrics listener of its own; 0: one
	env            []string // added to every process's environment
	// database is MAILYARD_DATABASE_URL; empty: a fresh database on the
	// shared test server (testenv.PostgresURL).
	database string
	// noAPI, noWorker, noDNS leave that process out (for a test that starts
	// its own, or needs none).
	noAPI, noWorker, noDNS bool
	// inProcess runs the api and the worker in the test process instead,
	// with this email retry schedule, which no environment variable can
	// shorten (`mailyard dns` stays a process).
	inProcess []time.Duration
}

// startStack is the one way the e2e tests start Mailyard: it migrates a
// fresh database, creates an organization with an admin key, starts what top
// asks for, waits for the listeners, and connects the test's Temporal
// client. metricsURL names the first api and worker.
func startStack(t *testing.T, top topology) *stack {
	t.Helper()
	s := newStack(t, top)
	switch {
	case top.inProcess != nil:
		s.runInProcess(top.inProcess)
	case !top.noAPI:
		s.apiProc = testenv.Start(t, s.env, "api")
	}
	var listeners []string
	for range max(top.apis, 1) - 1 {
		httpAddr, internalAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
		s.apiURLs = append(s.apiURLs, "http://"+httpAddr)
		s.internal = append(s.internal, internalAddr)
		listeners = append(listeners, httpAddr, internalAddr)
		testenv.Start(t, slices.Concat(s.env, []string{"MAILYARD_HTTP_ADDR=" + httpAddr, "MAILYARD_INTERNAL_ADDR=" + internalAddr}), "api")
	}
	if !top.noWorker && top.inProcess == nil {
		s.worker = s.startWorker()
		for range max(top.workers, 1) - 1 {
			testenv.Start(t, slices.Concat(s.env, []string{"MAILYARD_METRICS_ADDR=" + testenv.FreeAddr(t)}), "worker")
		}
	}
	if !top.noDNS {
		s.dns = testenv.Start(t, slices.Concat(s.env, []string{s.metricsEnv["dns"]}), "dns")
		listeners = append(listeners, s.dnsAddr)
	}
	if !top.noAPI {
		listeners = append(listeners, s.httpAddr)
	}
	for _, addr := range listeners {
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

// newStack is startStack's first half: the environment, the database and
// the organization.
func newStack(t *testing.T, top topology) *stack {
	t.Helper()
	cluster := top.temporal != ""
	switch {
	case cluster:
	case top.sharedTemporal:
		top.temporal = testenv.Temporal(t)
	default:
		// Its own Temporal server: the rotation workflows a test leaves running
		// must not be joined by the next test's domain with the same id.
		top.temporal = testenv.OwnTemporal(t)
	}
	if top.namespace == "" {
		top.namespace = "default"
	}
	if top.database == "" {
		top.database = testenv.PostgresURL(t)
	}
	s := &stack{t: t, customer: testenv.StartDNSZone(t), temporal: top.temporal, namespace: top.namespace, databaseURL: top.database}
	s.httpAddr = testenv.FreeAddr(t)
	internalAddr, workerMetrics, dnsMetrics := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	s.dnsAddr = testenv.FreeAddr(t)
	s.apiURL = "http://" + s.httpAddr
	s.apiURLs, s.internal = []string{s.apiURL}, []string{internalAddr}
	s.metricsURL = map[string]string{
		"api": "http://" + internalAddr + "/metrics", "worker": "http://" + workerMetrics + "/metrics", "dns": "http://" + dnsMetrics + "/metrics",
	}
	s.metricsEnv = map[string]string{"worker": "MAILYARD_METRICS_ADDR=" + workerMetrics, "dns": "MAILYARD_METRICS_ADDR=" + dnsMetrics}
	s.env = append([]string{
		"MAILYARD_DATABASE_URL=" + s.databaseURL,
		"TEMPORAL_ADDRESS=" + s.temporal,
		"TEMPORAL_NAMESPACE=" + s.namespace,
		"MAILYARD_ENCRYPTION_KEY=" + testEncryptionKey,
		"MAILYARD_INTERNAL_TOKEN=e2e-internal-token",
		"MAILYARD_HTTP_ADDR=" + s.httpAddr,
		"MAILYARD_INTERNAL_ADDR=" + internalAddr,
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
	return s
}

// startWorker starts a `mailyard worker` process with its metrics listener.
func (s *stack) startWorker() *testenv.Process {
	return testenv.Start(s.t, slices.Concat(s.env, []string{s.metricsEnv["worker"]}), "worker")
}

// apiOn is the admin client of the stack's i-th api process.
func (s *stack) apiOn(i int) *apiClient {
	return clientAt(s.t, s.apiURLs[i], s.adminKey)
}

// run runs a short-lived subcommand to completion.
func (s *stack) run(args ...string) string {
	s.t.Helper()
	return testenv.Run(s.t, s.env, args...)
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
