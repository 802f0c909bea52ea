package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/mailyard/mailyard/internal/testenv"
)

// TestMeasureSizing measures what one webhook delivery, one email (with its
// delivered webhook) and one inbound bounce cost on the real Temporal server
// with PostgreSQL persistence, for deploy/README.md's sizing table: history
// events of each workflow, and rows written (inserted, updated, deleted) in
// Mailyard's and Temporal's databases, averaged over n of each. It runs only
// when asked (MAILYARD_MEASURE_SIZING=1): it measures, it asserts nothing
// about the figures.
func TestMeasureSizing(t *testing.T) {
	if os.Getenv("MAILYARD_MEASURE_SIZING") == "" {
		t.Skip("set MAILYARD_MEASURE_SIZING=1 to measure the sizing table")
	}
	const n = 20
	admin := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN("postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")))
	defer admin.Close()
	databases := func(prefix string) map[string]bool {
		rows, err := admin.Query("SELECT datname FROM pg_database WHERE datname LIKE $1", prefix+"%")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var name string
			_ = rows.Scan(&name)
			out[name] = true
		}
		return out
	}
	before := databases("temporal_")
	temporal := testenv.StartRealTemporal(t)
	var temporalDBs []string
	for name := range databases("temporal_") {
		if !before[name] {
			temporalDBs = append(temporalDBs, name)
		}
	}
	mx := startMX(t)
	s := startTopology(t, topology{temporal: temporal.Address, namespace: "mailyard", apis: 1, workers: 1, env: append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/10m", "MAILYARD_WEBHOOK_ALLOW_HTTP=true", "MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"MAILYARD_EMAIL_RETENTION=2s", "MAILYARD_RATE_LIMIT=off",
	)})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	inboundAddr, _ := s.startInbound()
	mailyardDB := s.databaseURL[strings.LastIndex(s.databaseURL, "/")+1:]
	if i := strings.Index(mailyardDB, "?"); i >= 0 {
		mailyardDB = mailyardDB[:i]
	}

	rcv := &eventReceiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	s.call("POST", "/api/v1/webhooks", map[string]any{"url": hook.URL + "/hooks", "event_types": []string{"delivered", "bounced"}}, 201)
	domainID, _, _ := verifiedDomain(t, s, "shop.example")
	key := s.call("POST", "/api/v1/credentials", map[string]any{"sending_domain_id": domainID, "label": "app", "permissions": []string{"send"}}, 201)["secret_key"].(string)

	// writes is the rows written so far in each database. A backend flushes
	// its statistics at most once a second, and an idle one only after 10 s
	// (PostgreSQL 15), so snapshot waits 12 s first.
	writes := func(db string) int64 {
		var w int64
		if err := admin.QueryRow("SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = $1", db).Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	snapshot := func() (int64, int64) {
		time.Sleep(12 * time.Second)
		var tw int64
		for _, db := range temporalDBs {
			tw += writes(db)
		}
		return writes(mailyardDB), tw
	}
	historyEvents := func(query string) float64 {
		ctx := context.Background()
		list, err := s.temporalC.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.namespace, Query: query})
		if err != nil || len(list.Executions) == 0 {
			t.Fatalf("%s: %v (%d runs)", query, err, len(list.GetExecutions()))
		}
		total := 0
		for _, e := range list.Executions {
			total += int(e.HistoryLength)
		}
		return float64(total) / float64(len(list.Executions))
	}
	type row struct {
		what                  string
		history, mailyardRows float64
		temporalRows          float64
	}
	var rows []row
	measure := func(what, query string, run func()) {
		m0, t0 := snapshot()
		run()
		m1, t1 := snapshot()
		rows = append(rows, row{what, historyEvents(query), float64(m1-m0) / n, float64(t1-t0) / n})
	}

	measure("webhook delivery (ingested event, one webhook)", `WorkflowType = "WebhookDelivery" AND ExecutionStatus = "Completed"`, func() {
		for i := range n {
			ingest(t, s.internal[0], 9000+i)
		}
		testenv.Eventually(t, time.Minute, "deliveries", func() bool { return len(rcv.all()) >= n })
	})
	var senders []string
	measure("email (one recipient, delivered, its webhook, erased after retention)", `WorkflowType = "EmailDelivery" AND ExecutionStatus = "Completed"`, func() {
		ids := map[string]bool{}
		for i := range n {
			ids[s.callAs(key, "POST", "/api/v1/emails", map[string]any{"from": "billing@shop.example", "to": fmt.Sprintf("r%d@rcpt.example", i), "subject": "Receipt", "text": "Thanks."}, 202)["email"].(map[string]any)["id"].(string)] = true
		}
		testenv.Eventually(t, 2*time.Minute, "emails erased", func() bool {
			list, err := s.temporalC.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.namespace, Query: `WorkflowType = "EmailDelivery" AND ExecutionStatus = "Completed"`})
			return err == nil && len(list.Executions) >= n
		})
		mx.mu.Lock()
		senders = append(senders, mx.froms...)
		mx.mu.Unlock()
	})
	measure("inbound bounce (a DSN: recipient bounced, suppressed, its webhook, erased)", `WorkflowType = "InboundMessage" AND ExecutionStatus = "Completed"`, func() {
		for i, sender := range senders[:n] {
			rcpt := fmt.Sprintf("r%d@rcpt.example", i)
			if err := sendMail(inboundAddr, "", []string{sender}, postfixDSN(sender, rcpt, "x@shop.example", "5.1.1", "550 5.1.1 user unknown")); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 2*time.Minute, "inbound handled and erased", func() bool {
			list, err := s.temporalC.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.namespace, Query: `WorkflowType = "InboundMessage" AND ExecutionStatus = "Completed"`})
			return err == nil && len(list.Executions) >= n
		})
	})
	t.Logf("measured on the real Temporal server %s, %d of each:", time.Now().UTC().Format("2006-01-02"), n)
	t.Logf("| item | history events | Mailyard rows written | Temporal rows written |")
	for _, r := range rows {
		t.Logf("| %s | %.0f | %.1f | %.1f |", r.what, r.history, r.mailyardRows, r.temporalRows)
	}
}
