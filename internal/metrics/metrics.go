// Package metrics is sandboxer's Prometheus registry: the families an
// operator's monitoring scrapes from /metrics (docs/metrics.md).
//
// Other packages report through small, named calls on *Metrics (JobStarted,
// ToolCall, PoolTake, ...). Every method is safe on a nil *Metrics, so a
// server or a test without metrics wires nothing and branches nowhere.
//
// Label values never carry a job id, a command or anything an agent writes
// freely: each label takes its values from a closed set (kinds, statuses,
// tool names, languages, managers) and, as a backstop, a label keeps at most
// maxLabelValues distinct values and reports any further one as "other".
package metrics

import (
	"context"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxer/sandboxer/internal/observe"
)

// Namespace prefixes every family.
const Namespace = "sandboxer"

// maxLabelValues bounds the distinct values one label may take: a
// misbehaving source (a new tool per call, agents' block-list entries) can
// cost at most this many series per label.
const maxLabelValues = 64

// Other stands for a label value past the bound, and for an empty one.
const Other = "other"

// Sources are read at each scrape for the families that are states, not
// events (gauges). Any may be nil.
type Sources struct {
	// LiveJobs counts queued and running jobs by kind and status.
	LiveJobs func() map[[2]string]int
	// Workspaces counts workspaces by state.
	Workspaces func(ctx context.Context) (map[string]int, error)
	// PoolReady counts warm sandboxes ready to take, by image (reported by
	// language: SetImageLanguages).
	PoolReady func() map[string]int
	// Caches lists dependency caches: language, size in bytes (-1 unknown).
	Caches func(ctx context.Context) ([]Cache, error)
}

// Cache is one dependency cache as the gauges see it.
type Cache struct {
	Language  string
	SizeBytes int64
}

// Metrics holds the registry and the event families.
type Metrics struct {
	reg *prometheus.Registry

	jobsStarted   *prometheus.CounterVec
	jobsEnded     *prometheus.CounterVec
	queueWait     *prometheus.HistogramVec
	sandboxStart  *prometheus.HistogramVec
	runTime       *prometheus.HistogramVec
	toolCalls     *prometheus.CounterVec
	toolLatency   *prometheus.HistogramVec
	poolTakes     *prometheus.CounterVec
	installs      *prometheus.CounterVec
	blockDecision *prometheus.CounterVec
	engineErrors  *prometheus.CounterVec
	httpRequests  *prometheus.CounterVec

	mu     sync.Mutex
	seen   map[string]map[string]bool // family/label -> values admitted
	images map[string]string          // image -> language, for pool labels
}

// New makes a registry with the event families and the Go and process
// collectors. images says which language each image serves, so the pool's
// families are labelled by language (a name operators know), not by tag.
// The state families are read from the Sources each handler is given.
func New(images map[string]string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), seen: map[string]map[string]bool{}, images: maps.Clone(images)}
	if m.images == nil {
		m.images = map[string]string{}
	}
	// Seconds, from 5 ms to about 20 minutes: a warm start to a long job.
	durations := prometheus.ExponentialBuckets(0.005, 2.5, 14)
	m.jobsStarted = m.counter("jobs_started_total", "Jobs whose sandbox started, by kind and language.", "kind", "language")
	m.jobsEnded = m.counter("jobs_ended_total", "Jobs that ended, by kind, language, final status and reason.", "kind", "language", "status", "reason")
	m.queueWait = m.histogram("job_queue_wait_seconds", "Time from a job's submission until its sandbox starts being made.", durations, "kind")
	m.sandboxStart = m.histogram("sandbox_start_seconds", "Time to start a job's sandbox (warm or cold), by kind.", durations, "kind")
	m.runTime = m.histogram("job_run_seconds", "Time from a job's start to its end, by kind and final status.", durations, "kind", "status")
	m.toolCalls = m.counter("tool_calls_total", "MCP tool calls, by tool and outcome (ok or error).", "tool", "outcome")
	m.toolLatency = m.histogram("tool_call_duration_seconds", "MCP tool call latency, by tool.", durations, "tool")
	m.poolTakes = m.counter("pool_takes_total", "Jobs that asked the warm pool for a sandbox, by language and result (hit or miss).", "language", "result")
	m.installs = m.counter("package_installs_total", "Package and dependency installs, by manager and outcome (ok or failed).", "manager", "outcome")
	m.blockDecision = m.counter("blocklist_decisions_total", "Block-list checks, by decision (allowed or blocked) and the rule that matched.", "decision", "rule")
	m.engineErrors = m.counter("engine_errors_total", "Container engine calls that failed, by operation.", "operation")
	m.httpRequests = m.counter("http_requests_total", "HTTP requests to the metrics and console listener, by status code and tenant.", "code", "tenant")
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
	m.reg.MustRegister(h)
	return h
}

// bound admits v as a value of the label key (family/label) while that label
// has fewer than maxLabelValues values, else returns Other.
func (m *Metrics) bound(key, v string) string {
	if v == "" {
		return Other
	}
	if len(v) > 64 {
		v = v[:64]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	vals := m.seen[key]
	if vals == nil {
		vals = map[string]bool{}
		m.seen[key] = vals
	}
	if vals[v] {
		return v
	}
	if len(vals) >= maxLabelValues {
		return Other
	}
	vals[v] = true
	return v
}

// Registry is the registry, for tests and for serving elsewhere.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in Prometheus' text format, with the state
// families read from src at each scrape.
func (m *Metrics) Handler(src Sources) http.Handler {
	states := prometheus.NewRegistry()
	states.MustRegister(&stateCollector{src: src, m: m})
	return promhttp.HandlerFor(prometheus.Gatherers{m.reg, states}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

func (m *Metrics) languageOf(image string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.images[image]; ok {
		return l
	}
	return Other
}

// JobStarted counts a job whose sandbox started, with how long it waited
// for a slot and how long the sandbox took to start.
func (m *Metrics) JobStarted(kind, language string, queued, starting time.Duration) {
	if m == nil {
		return
	}
	kind = m.bound("job/kind", kind)
	m.jobsStarted.WithLabelValues(kind, m.bound("job/language", language)).Inc()
	m.queueWait.WithLabelValues(kind).Observe(queued.Seconds())
	m.sandboxStart.WithLabelValues(kind).Observe(starting.Seconds())
}

// JobEnded counts a job's end; ran is 0 for a job that never started.
func (m *Metrics) JobEnded(kind, language, status, reason string, ran time.Duration) {
	if m == nil {
		return
	}
	kind, status = m.bound("job/kind", kind), m.bound("job/status", status)
	if reason == "" {
		reason = "none"
	}
	m.jobsEnded.WithLabelValues(kind, m.bound("job/language", language), status, m.bound("job/reason", reason)).Inc()
	if ran > 0 {
		m.runTime.WithLabelValues(kind, status).Observe(ran.Seconds())
	}
}

// ToolCall counts one MCP tool call and its latency.
func (m *Metrics) ToolCall(tool string, failed bool, took time.Duration) {
	if m == nil {
		return
	}
	tool = m.bound("tool", tool)
	outcome := "ok"
	if failed {
		outcome = "error"
	}
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
	m.toolLatency.WithLabelValues(tool).Observe(took.Seconds())
}

// PoolTake counts a job that found a warm sandbox of its image (hit) or none.
func (m *Metrics) PoolTake(image string, hit bool) {
	if m == nil {
		return
	}
	result := "miss"
	if hit {
		result = "hit"
	}
	m.poolTakes.WithLabelValues(m.bound("pool/language", m.languageOf(image)), result).Inc()
}

// Install counts one install run by a package manager (pip, npm, apt, ...;
// "deps-python" style names for scripts' dependency caches).
func (m *Metrics) Install(manager string, ok bool) {
	if m == nil {
		return
	}
	outcome := "ok"
	if !ok {
		outcome = "failed"
	}
	m.installs.WithLabelValues(m.bound("install/manager", manager), outcome).Inc()
}

// BlockDecision counts one block-list check; rule is the matched command
// name when blocked.
func (m *Metrics) BlockDecision(blocked bool, rule string) {
	if m == nil {
		return
	}
	if !blocked {
		m.blockDecision.WithLabelValues("allowed", "none").Inc()
		return
	}
	m.blockDecision.WithLabelValues("blocked", m.bound("block/rule", rule)).Inc()
}

// EngineError counts a failed engine call by operation (start, exec, ...).
func (m *Metrics) EngineError(operation string) {
	if m == nil {
		return
	}
	m.engineErrors.WithLabelValues(m.bound("engine/operation", operation)).Inc()
}

// HTTPRequest counts one request to the listener; tenant is "" when the
// request carried no valid token.
func (m *Metrics) HTTPRequest(code int, tenant string) {
	if m == nil {
		return
	}
	if tenant == "" {
		tenant = "anonymous"
	}
	m.httpRequests.WithLabelValues(strconv.Itoa(code), m.bound("http/tenant", tenant)).Inc()
}

var _ observe.Observer = (*Metrics)(nil)
