package metrics

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// The Temporal SDK reports its metrics (worker polls, task slots, schedule-to-
// start latencies, requests to the server, ...) through a client.MetricsHandler.
// Temporal's own Prometheus bridge, go.temporal.io/sdk/contrib/tally with
// tally's reporter, is not published on the Go module proxy, and the
// OpenTelemetry one would bring a second metrics stack; this adapter writes
// the SDK's metrics straight into the process's client_golang registry.
//
// Names follow Prometheus conventions, like Temporal's OpenTelemetry exporter
// writes them: a counter gets "_total" (temporal_request_total), a timer is a
// histogram in seconds with "_seconds" (temporal_activity_execution_latency_seconds),
// a gauge keeps the SDK's name (temporal_worker_task_slots_available).
//
// The SDK does not give every use of a name the same tags, while a
// prometheus.*Vec needs fixed label names; so each series is a metric with
// its tags as constant labels, and one unchecked collector reports them all.

// TemporalHandler is the SDK metrics handler of this process: give it to
// client.Options.MetricsHandler, and every client and worker made from that
// client reports into the registry Handler serves.
func TemporalHandler() client.MetricsHandler { return temporalHandler{c: temporalSDK} }

// temporalBuckets are the bounds (seconds) of the SDK's timers: from request
// latencies in milliseconds to the 15-minute email attempt and long polls.
var temporalBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900}

var temporalSDK = &temporalCollector{series: map[string]prometheus.Collector{}, help: map[string]string{}}

type temporalKind int

const (
	temporalCounter temporalKind = iota
	temporalGauge
	temporalTimer
)

// temporalCollector holds every series the SDK has asked for.
type temporalCollector struct {
	mu sync.Mutex
	// series by metric name and sorted labels.
	series map[string]prometheus.Collector
	// help by metric name, which also pins the name to one kind: Prometheus
	// refuses a name that is a counter in one series and a gauge in another.
	help map[string]string
}

// Describe sends nothing: the series are not known in advance, which makes
// this an unchecked collector.
func (*temporalCollector) Describe(chan<- *prometheus.Desc) {}

func (c *temporalCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	all := slices.Collect(maps.Values(c.series))
	c.mu.Unlock()
	for _, s := range all {
		s.Collect(ch)
	}
}

// get returns the series of name with labels, making it on first use. A name
// used as two kinds (not done by the SDK) keeps its first kind; the other
// use records into a series nobody collects, rather than breaking the scrape.
func (c *temporalCollector) get(sdkName string, kind temporalKind, labels prometheus.Labels) prometheus.Collector {
	name := promName(sdkName, kind)
	key := name + "\xff" + labelKey(labels)
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.series[key]; ok {
		return s
	}
	help := "Temporal SDK metric " + sdkName + " (a counter)."
	switch kind {
	case temporalGauge:
		help = "Temporal SDK metric " + sdkName + " (a gauge)."
	case temporalTimer:
		help = "Temporal SDK metric " + sdkName + " (a timer, in seconds)."
	}
	var s prometheus.Collector
	switch kind {
	case temporalCounter:
		s = prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	case temporalGauge:
		s = prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	default:
		s = prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: temporalBuckets})
	}
	if first, ok := c.help[name]; ok && first != help {
		return s
	}
	c.help[name] = help
	c.series[key] = s
	return s
}

var invalidNameChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// promName is the Prometheus name of an SDK metric of kind.
func promName(sdkName string, kind temporalKind) string {
	name := invalidNameChars.ReplaceAllString(sdkName, "_")
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		name = "temporal_" + name
	}
	switch kind {
	case temporalCounter:
		if !strings.HasSuffix(name, "_total") {
			name += "_total"
		}
	case temporalTimer:
		name += "_seconds"
	}
	return name
}

// labelKey identifies a label set; labels are sorted by name.
func labelKey(labels prometheus.Labels) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k + "=" + labels[k] + "\xfe")
	}
	return b.String()
}

// temporalHandler is the SDK's view: a set of tags and the collector.
type temporalHandler struct {
	c    *temporalCollector
	tags prometheus.Labels
}

// WithTags returns a handler whose tags are these over the current ones. A
// tag with an empty value is left out: Prometheus treats an empty label as
// absent, and keeping it would make two series of one.
func (h temporalHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(prometheus.Labels, len(h.tags)+len(tags))
	maps.Copy(merged, h.tags)
	for k, v := range tags {
		k = invalidNameChars.ReplaceAllString(k, "_")
		if k == "" || k[0] >= '0' && k[0] <= '9' || strings.HasPrefix(k, "__") || k == "le" {
			continue
		}
		if v == "" {
			delete(merged, k)
			continue
		}
		merged[k] = v
	}
	return temporalHandler{c: h.c, tags: merged}
}

func (h temporalHandler) Counter(name string) client.MetricsCounter {
	c := h.c.get(name, temporalCounter, h.tags).(prometheus.Counter)
	return counterFunc(func(n int64) {
		if n > 0 {
			c.Add(float64(n))
		}
	})
}

func (h temporalHandler) Gauge(name string) client.MetricsGauge {
	g := h.c.get(name, temporalGauge, h.tags).(prometheus.Gauge)
	return gaugeFunc(g.Set)
}

func (h temporalHandler) Timer(name string) client.MetricsTimer {
	o := h.c.get(name, temporalTimer, h.tags).(prometheus.Histogram)
	return timerFunc(func(d time.Duration) { o.Observe(d.Seconds()) })
}

type counterFunc func(int64)

func (f counterFunc) Inc(n int64) { f(n) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }
