package main

import (
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// temporalTarget is the Temporal server a benchmark measures on.
type temporalTarget struct {
	Address    string // frontend gRPC, host:port
	Pid        int    // its process, whose CPU time the benchmarks read
	MetricsURL string // its Prometheus metrics
}

// serverCounters are a Temporal server's counters that say where its work
// went, beside the CPU it used: requests to its persistence store, and the
// workflow tasks matching handed out from its stored backlog. A task handed
// straight to a waiting poller costs no storage; at saturation, when the
// workers fall behind, matching stores the tasks in the persistence database
// and reads them back, which costs more of both the server and the database.
// An eager start hands the first workflow task out with the start, without
// matching. Matching hands a new task straight to a waiting poller only once
// the history service has recorded it started, within a second (ten for a
// task from the stored backlog); when the persistence store takes longer,
// the hand-out fails and the history service tries the task again later,
// or, when the record landed after all, the task is lost until its timeout
// (a workflow task's is 10 s), since the workers never stop in a
// benchmark: either holds a whole phase back.
type serverCounters struct {
	persistence float64 // requests to the persistence store (visibility apart)
	backlog     float64 // workflow tasks handed out from the stored backlog
	failed      float64 // hand-outs of tasks to pollers that failed
	timedOut    float64 // workflow and activity tasks timed out after their start
}

// readServerCounters reads the counters from a server's metrics. A server
// that does not answer is an error, not zeros that would read as figures.
func readServerCounters(url string) (serverCounters, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return serverCounters{}, fmt.Errorf("the Temporal server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return serverCounters{}, fmt.Errorf("the Temporal server's metrics: GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return serverCounters{}, fmt.Errorf("the Temporal server's metrics: %w", err)
	}
	// The operation names the request; for matching's latency of a task
	// taken from the backlog, the poll that took it.
	sum := func(family, operation string) float64 {
		var total float64
		for _, m := range families[family].GetMetric() {
			if operation != "" && label(m, "operation") != operation {
				continue
			}
			switch {
			case m.GetHistogram() != nil:
				total += float64(m.GetHistogram().GetSampleCount())
			case m.GetSummary() != nil:
				total += float64(m.GetSummary().GetSampleCount())
			default:
				total += m.GetCounter().GetValue()
			}
		}
		return total
	}
	return serverCounters{
		persistence: sum("persistence_requests", ""),
		backlog:     sum("asyncmatch_latency", "PollWorkflowTaskQueue"),
		failed:      sum("service_errors", "AddWorkflowTask") + sum("service_errors", "AddActivityTask"),
		timedOut:    sum("start_to_close_timeout", ""),
	}, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (c serverCounters) sub(o serverCounters) serverCounters {
	return serverCounters{persistence: c.persistence - o.persistence, backlog: c.backlog - o.backlog, failed: c.failed - o.failed, timedOut: c.timedOut - o.timedOut}
}

func (c serverCounters) add(o serverCounters) serverCounters {
	return serverCounters{persistence: c.persistence + o.persistence, backlog: c.backlog + o.backlog, failed: c.failed + o.failed, timedOut: c.timedOut + o.timedOut}
}

// per divides the counts by a number of items.
func (c serverCounters) per(n int) serverCounters {
	return serverCounters{persistence: c.persistence / float64(n), backlog: c.backlog / float64(n), failed: c.failed / float64(n), timedOut: c.timedOut / float64(n)}
}
