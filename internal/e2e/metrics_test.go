package e2e

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailyard/mailyard/internal/testenv"
)

// scrapeAll fetches /metrics of the api, worker and dns processes and lints
// each scrape with promtool.
func (s *stack) scrapeAll() map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for process, url := range s.metricsURL {
		out[process] = testenv.Scrape(s.t, url)
		testenv.CheckMetrics(s.t, []byte(out[process]))
	}
	return out
}

// hasLine reports whether scrape has a sample line matching pattern.
func hasLine(scrape, pattern string) bool {
	return regexp.MustCompile(`(?m)^` + pattern).MatchString(scrape)
}

// Each process serves its metrics where deploy/README.md says, without a
// token, in a form promtool finds clean; each counts its own work, and the
// ones with a Temporal client report the SDK's metrics.
func TestEveryProcessServesMetrics(t *testing.T) {
	t.Parallel()
	s := startStack(t, topology{env: []string{"MAILYARD_VERIFY_SCHEDULE=1s/60s"}})
	s.api().domains()
	s.api().addDomain("metrics.example", "")
	soa := new(dns.Msg)
	soa.SetQuestion("dkim.mailyard.test.", dns.TypeSOA)
	if res, err := dns.Exchange(soa, s.dnsAddr); err != nil || res.Rcode != dns.RcodeSuccess {
		t.Fatalf("SOA query: %v %v", res, err)
	}

	// The onboarding workflow checks the records at once: none is there yet.
	var scrapes map[string]string
	testenv.Eventually(t, 60*time.Second, "the worker to count verification checks", func() bool {
		scrapes = s.scrapeAll()
		// The SDK records an activity's latency after the activity returns,
		// a moment after the check counted inside it.
		return testenv.Sample(t, scrapes["worker"], `mailyard_verification_checks_total{record="cname",result="pending"}`) >= 2 &&
			hasLine(scrapes["worker"], `temporal_activity_execution_latency_seconds_count\{.*activity_type="CheckDNSRecords".*\} [1-9]`)
	})
	api, worker, dnsScrape := scrapes["api"], scrapes["worker"], scrapes["dns"]

	for series, want := range map[string]float64{
		`mailyard_http_requests_total{operation="list-domains",status="200"}`:  1,
		`mailyard_http_requests_total{operation="add-domain",status="201"}`:    1,
		`mailyard_http_request_duration_seconds_count{operation="add-domain"}`: 1,
	} {
		if got := testenv.Sample(t, api, series); got != want {
			t.Errorf("api: %s = %v, want %v", series, got, want)
		}
	}
	if got := testenv.Sample(t, dnsScrape, `mailyard_dns_queries_total{qtype="SOA",rcode="NOERROR"}`); got != 1 {
		t.Errorf("dns: SOA queries = %v, want 1", got)
	}
	for process, patterns := range map[string][]string{
		// The API starts the onboarding workflow through its client.
		"api": {`temporal_request_total\{.*operation="StartWorkflowExecution".*\} [1-9]`},
		// Every task queue's worker polls and reports its slots.
		"worker": {
			`temporal_worker_task_slots_available\{.*task_queue="mailyard-domains".*\} `,
			`temporal_worker_task_slots_available\{.*task_queue="mailyard-webhooks".*\} `,
			`temporal_worker_task_slots_available\{.*task_queue="mailyard-emails".*\} `,
			`temporal_activity_execution_latency_seconds_count\{.*activity_type="CheckDNSRecords".*\} [1-9]`,
			`mailyard_verification_checks_total\{record="spf",result="pending"\} [1-9]`,
		},
		"dns": {`process_resident_memory_bytes `, `go_goroutines `},
	} {
		for _, p := range patterns {
			if !hasLine(scrapes[process], p) {
				t.Errorf("%s: no line matching %s", process, p)
			}
		}
	}
	// `mailyard dns` has no Temporal client; no API request reaches the worker.
	if strings.Contains(dnsScrape, "\ntemporal_") {
		t.Error("dns reports Temporal SDK metrics")
	}
	if hasLine(worker, `mailyard_http_requests_total\{`) {
		t.Error("the worker counts HTTP requests")
	}
}

// The worker counts each recipient's outcome, the SMTP attempt and the
// outcome webhooks' POSTs; dns counts the DKIM key look-ups of a receiver.
// Then the metrics of deploy/'s alerts and dashboard are all exported.
func TestSendingMetrics(t *testing.T) {
	t.Parallel()
	mx := startMX(t)
	s := startStack(t, topology{env: append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/60s",
		"MAILYARD_WEBHOOK_ALLOW_HTTP=true",
		"MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
	)})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	rcv := &eventReceiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	api := s.api()
	api.createWebhook(hook.URL+"/hooks", "delivered", "bounced")
	id, sel1, _ := verifiedDomain(t, s, "shop.example")

	// One attempt: one recipient accepted, one refused with 550.
	api.as(api.sendKey(id)).send(map[string]any{
		"from": "billing@shop.example", "to": []string{"ok@rcpt.example", "reject@rcpt.example"}, "subject": "Hi", "text": "Hello.",
	})
	testenv.Eventually(t, 60*time.Second, "two outcome webhooks", func() bool { return len(rcv.all()) == 2 })
	// The POST is counted just after the receiver answers it.
	var worker string
	testenv.Eventually(t, 10*time.Second, "the worker's webhook count", func() bool {
		worker = testenv.Scrape(t, s.metricsURL["worker"])
		return testenv.Sample(t, worker, `mailyard_webhook_attempts_total{outcome="success"}`) >= 2
	})
	for series, want := range map[string]float64{
		`mailyard_email_recipient_attempts_total{outcome="delivered"}`:       1,
		`mailyard_email_recipient_attempts_total{outcome="bounced"}`:         1,
		`mailyard_email_recipient_attempts_total{outcome="deferred"}`:        0,
		`mailyard_email_attempt_duration_seconds_count`:                      1,
		`mailyard_webhook_attempts_total{outcome="success"}`:                 2,
		`mailyard_webhook_attempts_total{outcome="retryable"}`:               0,
		`mailyard_webhook_attempt_duration_seconds_count{outcome="success"}`: 2,
	} {
		if got := testenv.Sample(t, worker, series); got != want {
			t.Errorf("worker: %s = %v, want %v", series, got, want)
		}
	}
	testenv.CheckMetrics(t, []byte(worker))

	// A receiver looks the DKIM key up.
	before := testenv.Sample(t, testenv.Scrape(t, s.metricsURL["dns"]), `mailyard_dns_queries_total{qtype="TXT",rcode="NOERROR"}`)
	if txt := queryTXT(t, s.dnsAddr, sel1+".dkim.mailyard.test."); !strings.Contains(txt, "v=DKIM1") {
		t.Fatalf("DKIM key look-up: %q", txt)
	}
	dnsScrape := testenv.Scrape(t, s.metricsURL["dns"])
	if got := testenv.Sample(t, dnsScrape, `mailyard_dns_queries_total{qtype="TXT",rcode="NOERROR"}`) - before; got != 1 {
		t.Errorf("dns: the look-up added %v TXT answers, want 1", got)
	}
	testenv.CheckMetrics(t, []byte(dnsScrape))

	// Every family the alerts and the dashboard of deploy/ use exists by now:
	// an email sent, webhooks delivered, a domain verified, a DKIM look-up.
	checkMonitoringMetrics(t, s.scrapeAll())
}
