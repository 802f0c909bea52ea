package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/mailyard/mailyard/internal/metrics"
	"github.com/mailyard/mailyard/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scrape fetches the registry over HTTP as Prometheus would.
func scrape(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(metrics.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d: %s", res.StatusCode, body)
	}
	return string(body)
}

// mustHave fails unless the scrape has a sample line matching pattern (a
// regular expression anchored at the start of a line).
func mustHave(t *testing.T, scrape string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(`(?m)^` + p).MatchString(scrape) {
			t.Errorf("the scrape has no line matching %s", p)
		}
	}
}

func greet(ctx workflow.Context, name string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	err := workflow.ExecuteActivity(ctx, "Hello", name).Get(ctx, &out)
	return out, err
}

// Every metric Mailyard defines, and the SDK's metrics of a real worker
// running a real workflow, come out of one scrape that promtool finds clean.
func TestScrapeHasEveryMetricAndIsClean(t *testing.T) {
	metrics.ObserveHTTPRequest("list-domains", 200, 30*time.Millisecond)
	metrics.ObserveHTTPRequest("", 404, time.Millisecond)
	metrics.ObserveWebhookAttempt(metrics.WebhookRetryable, 2*time.Second)
	metrics.ObserveEmailAttempt(3 * time.Second)
	metrics.CountEmailRecipient(metrics.EmailDeferred)
	metrics.CountVerificationCheck("cname", "verified")
	metrics.CountDNSQuery("TXT", "NOERROR")

	tc, err := client.Dial(client.Options{HostPort: testenv.Temporal(t), MetricsHandler: metrics.TemporalHandler()})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	const queue = "metrics-test"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(greet, workflow.RegisterOptions{Name: "Greet"})
	w.RegisterActivityWithOptions(func(ctx context.Context, name string) (string, error) { return "hello " + name, nil },
		activity.RegisterOptions{Name: "Hello"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, "Greet", "metrics")
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil || out != "hello metrics" {
		t.Fatalf("workflow: %q, %v", out, err)
	}

	// The worker counts the completion after it reports it to the server.
	var body string
	completed := regexp.MustCompile(`(?m)^temporal_workflow_completed_total\{.*workflow_type="Greet".*\} 1$`)
	testenv.Eventually(t, 10*time.Second, "temporal_workflow_completed_total", func() bool {
		body = scrape(t)
		return completed.MatchString(body)
	})
	mustHave(t, body,
		`mailyard_http_requests_total\{operation="list-domains",status="200"\} 1$`,
		`mailyard_http_requests_total\{operation="other",status="404"\} 1$`,
		`mailyard_http_request_duration_seconds_bucket\{operation="list-domains",le="0.05"\} 1$`,
		`mailyard_webhook_attempts_total\{outcome="retryable"\} 1$`,
		`mailyard_webhook_attempts_total\{outcome="success"\} 0$`,
		`mailyard_webhook_attempt_duration_seconds_count\{outcome="retryable"\} 1$`,
		`mailyard_email_recipient_attempts_total\{outcome="deferred"\} 1$`,
		`mailyard_email_recipient_attempts_total\{outcome="bounced"\} 0$`,
		`mailyard_email_attempt_duration_seconds_bucket\{le="5"\} 1$`,
		`mailyard_verification_checks_total\{record="cname",result="verified"\} 1$`,
		`mailyard_dns_queries_total\{qtype="TXT",rcode="NOERROR"\} 1$`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
		// The SDK's own metrics, renamed to the conventions.
		`temporal_workflow_completed_total\{.*workflow_type="Greet".*\} 1$`,
		`temporal_activity_execution_latency_seconds_bucket\{.*activity_type="Hello".*\} `,
		`temporal_request_total\{.*operation="StartWorkflowExecution".*\} 1$`,
		`temporal_worker_task_slots_available\{.*task_queue="metrics-test".*\} `,
	)
	testenv.CheckMetrics(t, []byte(body))
}

// The SDK gives one name different tag sets; each set is its own series and
// a tag set to "" is dropped (Prometheus reads an empty label as none).
func TestTemporalHandlerTags(t *testing.T) {
	h := metrics.TemporalHandler().WithTags(map[string]string{"namespace": "ns1", "task_queue": "q"})
	h.Counter("temporal_test_tags").Inc(2)
	h.WithTags(map[string]string{"task_queue": ""}).Counter("temporal_test_tags").Inc(1)
	h.WithTags(map[string]string{"operation": "Poll"}).Counter("temporal_test_tags").Inc(5)
	h.Counter("temporal_test_tags").Inc(-3) // counters never go down
	h.Gauge("temporal_test_level").Update(7)
	h.Timer("temporal_test_timer").Record(1500 * time.Millisecond)

	body := scrape(t)
	mustHave(t, body,
		`temporal_test_tags_total\{namespace="ns1",task_queue="q"\} 2$`,
		`temporal_test_tags_total\{namespace="ns1"\} 1$`,
		`temporal_test_tags_total\{namespace="ns1",operation="Poll",task_queue="q"\} 5$`,
		`temporal_test_level\{namespace="ns1",task_queue="q"\} 7$`,
		`temporal_test_timer_seconds_sum\{namespace="ns1",task_queue="q"\} 1.5$`,
		`temporal_test_timer_seconds_bucket\{namespace="ns1",task_queue="q",le="2.5"\} 1$`,
	)
	if n := strings.Count(body, "# HELP temporal_test_tags_total "); n != 1 {
		t.Errorf("temporal_test_tags_total has %d HELP lines, want 1", n)
	}
	testenv.CheckMetrics(t, []byte(body))
}
