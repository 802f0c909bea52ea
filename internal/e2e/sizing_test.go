package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"os"
	"sort"
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
// events of each workflow, and rows written (inserted, updated, deleted; from
// pg_stat_user_tables, table by table) in Mailyard's and Temporal's databases,
// averaged over n of each. An idle interval first gives what the stack writes
// with nothing to do (schedules, sweeps, Temporal's own system workflows), so
// the per-item figures can be read against it. It runs only when asked
// (MAILYARD_MEASURE_SIZING=1): it measures, it asserts nothing about the
// figures.
func TestMeasureSizing(t *testing.T) {
	if os.Getenv("MAILYARD_MEASURE_SIZING") == "" {
		t.Skip("set MAILYARD_MEASURE_SIZING=1 to measure the sizing table")
	}
	const n = 20
	temporal := testenv.StartRealTemporal(t)
	mx := startMX(t)
	s := startStack(t, topology{temporal: temporal.Address, namespace: "mailyard", apis: 1, workers: 1, env: append(mx.env(),
		"MAILYARD_VERIFY_SCHEDULE=1s/10m", "MAILYARD_WEBHOOK_ALLOW_HTTP=true", "MAILYARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"MAILYARD_EMAIL_RETENTION=2s", "MAILYARD_RATE_LIMIT=off",
	)})
	s.customer.Forward("dkim.mailyard.test", s.dnsAddr)
	mx.route(t, s.customer)
	inboundAddr, _ := s.startInbound()
	rcv := &eventReceiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	s.api().createWebhook(hook.URL+"/hooks", "delivered", "bounced")
	domainID, _, _ := verifiedDomain(t, s, "shop.example")
	sender := s.api().as(s.api().sendKey(domainID))

	// snapshot is the rows written so far in each table of the databases, by
	// "database.table" (persistence, visibility, mailyard). A backend flushes its
	// statistics at most once a second, and an idle one only after 10 s
	// (PostgreSQL 15), so snapshot waits 12 s first.
	databases := map[string]*sql.DB{}
	for name, url := range map[string]string{"temporal": temporal.Persistence, "visibility": temporal.Visibility, "mailyard": s.databaseURL} {
		db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(url)))
		t.Cleanup(func() { _ = db.Close() })
		databases[name] = db
	}
	snapshot := func() map[string]int64 {
		time.Sleep(12 * time.Second)
		out := map[string]int64{}
		for name, db := range databases {
			rows, err := db.Query("SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var table string
				var w int64
				if err := rows.Scan(&table, &w); err != nil {
					t.Fatal(err)
				}
				out[name+"."+table] = w
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return out
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
		what                                 string
		history                              float64
		mailyardRows, temporalRows, idleRows float64
		took                                 time.Duration
		tables                               []string
	}
	var rows []row
	// idlePerSecond is what the stack writes per second doing nothing, by
	// database; each item's idle column is that over its own measured interval.
	idlePerSecond := map[string]float64{}
	sum := func(before, after map[string]int64, database string) float64 {
		var w int64
		for k, v := range after {
			if strings.HasPrefix(k, database+".") {
				w += v - before[k]
			}
		}
		return float64(w)
	}
	{
		before, from := snapshot(), time.Now()
		time.Sleep(30 * time.Second)
		after := snapshot()
		for _, db := range []string{"mailyard", "temporal", "visibility"} {
			idlePerSecond[db] = sum(before, after, db) / time.Since(from).Seconds()
		}
		t.Logf("idle: %.2f Mailyard rows/s, %.2f Temporal persistence rows/s, %.2f visibility rows/s", idlePerSecond["mailyard"], idlePerSecond["temporal"], idlePerSecond["visibility"])
	}
	// unerased counts the rows of a Mailyard table the retention sweep has
	// still to erase.
	unerased := func(table string) int {
		var left int
		if err := databases["mailyard"].QueryRow("SELECT count(*) FROM " + table + " WHERE erased_at IS NULL").Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left
	}
	measure := func(what, query string, run func()) {
		before, from := snapshot(), time.Now()
		run()
		after := snapshot()
		took := time.Since(from)
		r := row{what: what, history: historyEvents(query), took: took,
			mailyardRows: sum(before, after, "mailyard") / n,
			temporalRows: (sum(before, after, "temporal") + sum(before, after, "visibility")) / n,
			idleRows:     (idlePerSecond["mailyard"] + idlePerSecond["temporal"] + idlePerSecond["visibility"]) * took.Seconds() / n,
		}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				r.tables = append(r.tables, fmt.Sprintf("%s %.2f", k, float64(d)/n))
			}
		}
		sort.Strings(r.tables)
		rows = append(rows, r)
	}

	measure("webhook delivery (ingested event, one webhook)", `WorkflowType = "WebhookDelivery" AND ExecutionStatus = "Completed"`, func() {
		for i := range n {
			ingest(t, s.internal[0], 9000+i)
		}
		testenv.Eventually(t, time.Minute, "deliveries", func() bool { return len(rcv.all()) >= n })
	})
	var senders []string
	measure("email (one recipient, delivered, its webhook, erased by the retention sweep)", `WorkflowType = "EmailDelivery" AND ExecutionStatus = "Completed"`, func() {
		ids := map[string]bool{}
		for i := range n {
			ids[sender.send(map[string]any{"from": "billing@shop.example", "to": fmt.Sprintf("r%d@rcpt.example", i), "subject": "Receipt", "text": "Thanks."}).ID] = true
		}
		testenv.Eventually(t, 2*time.Minute, "emails sent and erased", func() bool {
			list, err := s.temporalC.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.namespace, Query: `WorkflowType = "EmailDelivery" AND ExecutionStatus = "Completed"`})
			return err == nil && len(list.Executions) >= n && unerased("emails") == 0
		})
		mx.mu.Lock()
		senders = append(senders, mx.froms...)
		mx.mu.Unlock()
	})
	measure("inbound bounce (a DSN: recipient bounced, suppressed, its webhook, erased by the retention sweep)", `WorkflowType = "InboundMessage" AND ExecutionStatus = "Completed"`, func() {
		for i, sender := range senders[:n] {
			rcpt := fmt.Sprintf("r%d@rcpt.example", i)
			if err := sendMail(inboundAddr, "", []string{sender}, postfixDSN(sender, rcpt, "x@shop.example", "5.1.1", "550 5.1.1 user unknown")); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 2*time.Minute, "inbound handled and erased", func() bool {
			list, err := s.temporalC.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.namespace, Query: `WorkflowType = "InboundMessage" AND ExecutionStatus = "Completed"`})
			return err == nil && len(list.Executions) >= n && unerased("inbound_messages") == 0
		})
	})
	t.Logf("measured on the real Temporal server %s, %d of each:", time.Now().UTC().Format("2006-01-02"), n)
	t.Logf("| item | history events | Mailyard rows written | Temporal rows written | idle writes over the same interval (both) | interval |")
	for _, r := range rows {
		t.Logf("| %s | %.0f | %.2f | %.2f | %.2f | %s |", r.what, r.history, r.mailyardRows, r.temporalRows, r.idleRows, r.took.Round(time.Second))
	}
	for _, r := range rows {
		t.Logf("%s, rows written per item by table:\n\t%s", r.what, strings.Join(r.tables, "\n\t"))
	}
}
