// Package telemetry exports the server's call timelines (observe.Timeline)
// as OpenTelemetry spans over OTLP, configured by the standard OTEL_*
// variables: a tool call is a span whose parent is the traceparent the
// client sent in the call's _meta, and the job's phases and its egress
// proxy's decisions are its children.
// Without an OTLP endpoint in the environment nothing is set up and nothing
// is spent.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxer/sandboxer/internal/observe"
)

// Tracer turns timelines into spans and exports them.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	jobs   jobSpans // the egress proxy's decisions, by job (Egress)
}

// Enabled says whether the environment asks for traces: an OTLP endpoint
// is set, and neither OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none says
// otherwise.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv sets up the exporter the OTEL_* variables describe (nil, nil
// when Enabled is false). The exporters read the endpoint, headers,
// timeout and TLS variables themselves; the SDK reads the sampler
// (OTEL_TRACES_SAMPLER, default parent-based always-on) and the batch
// settings (OTEL_BSP_*); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// name the service (default "sandboxer").
func FromEnv(ctx context.Context, version string) (*Tracer, error) {
	if !Enabled() {
		return nil, nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not one sandboxer exports with (http/protobuf or grpc)", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "sandboxer"), attribute.String("service.version", version)),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{tp: tp, tracer: tp.Tracer("github.com/sandboxer/sandboxer")}, nil
}

// Shutdown exports what is buffered and stops.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// phase is a child span of a call, between two marks of its timeline.
type phase struct{ name, from, to string }

// phases are the job's steps as spans (the marks of internal/observe's
// callers: job manager, pool, docker runtime, supervisor stamps).
var phases = []phase{
	{"job.record", "handler", "recorded"},
	{"sandbox.claim", "spec_built", "sandbox_started"},
	{"sandbox.spec", "spec_sent", "sv_spec"},
	{"job.start", "sv_spec", "sv_started"},
	{"job.run", "sv_started", "sv_exited"},
	{"job.report", "sv_exited", "exit_seen"},
	{"job.end", "exit_seen", "end_recorded"},
	{"result", "waited", "result_built"},
	// A workspace woken for the call, and a fork's steps.
	{"workspace.thaw", "ws_thaw", "ws_thawed"},
	{"workspace.restore", "ws_restore", "ws_restored"},
	{"workspace.fork.checkpoint", "fork_checkpoint", "fork_checkpointed"},
	{"workspace.fork.copies", "fork_checkpointed", "fork_copied"},
}

// attributeNotes are the timeline's notes that become span attributes,
// under their OpenTelemetry names. No command text, no secret: none is noted.
var attributeNotes = map[string]string{
	"tool": "mcp.tool.name", "tenant": "sandboxer.tenant", "job": "sandboxer.job.id", "image": "container.image.name",
	"status": "sandboxer.job.status", "exit_code": "process.exit.code", "output_bytes": "sandboxer.job.output_bytes",
	"workspace": "sandboxer.workspace",
}

// Export turns one call's timeline into spans.
func (t *Tracer) Export(tl *observe.Timeline) {
	if t == nil || tl == nil {
		return
	}
	marks := tl.Marks()
	if len(marks) == 0 {
		return
	}
	at := make(map[string]time.Time, len(marks))
	for _, m := range marks {
		at[m.Name] = m.At
	}
	notes := tl.Notes()
	ctx := context.Background()
	if tp := notes["traceparent"]; tp != "" {
		carrier := propagation.MapCarrier{"traceparent": tp, "tracestate": notes["tracestate"]}
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
	}
	var attrs []attribute.KeyValue
	for k, name := range attributeNotes {
		if v, ok := notes[k]; ok {
			attrs = append(attrs, attribute.String(name, v))
		}
	}
	ctx, call := t.tracer.Start(ctx, "tools/call "+notes["tool"], trace.WithTimestamp(tl.Start()),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	for _, p := range phases {
		from, ok1 := at[p.from]
		to, ok2 := at[p.to]
		if !ok1 || !ok2 || to.Before(from) {
			continue
		}
		_, span := t.tracer.Start(ctx, p.name, trace.WithTimestamp(from))
		if p.name == "sandbox.claim" {
			_, warm := at["warm_taken"]
			span.SetAttributes(attribute.Bool("sandboxer.pool.warm", warm))
		}
		span.End(trace.WithTimestamp(to))
	}
	call.End(trace.WithTimestamp(marks[len(marks)-1].At))
	if job := notes["job"]; job != "" {
		t.joined(job, call.SpanContext(), time.Now())
	}
}

// EgressDecision is one decision of the egress proxy, for a span of the
// job's call: where to, allowed or why not, the bytes each way, and the
// number of secrets put in (never their values).
type EgressDecision struct {
	Tenant, Job string
	Host        string
	Port        int
	Allowed     bool
	Reason      string
	BytesUp     int64
	BytesDown   int64
	Secrets     int
	Start, End  time.Time
}

// Bounds of the egress spans kept for a call not exported yet, and of the
// jobs whose call span is remembered for later decisions.
const (
	maxPendingPerJob = 64
	maxJobCalls      = 4096
	jobCallKeep      = time.Hour
)

// jobSpans relates a job to its call's span: a decision made while the call
// still waits is kept until the call is exported, one made after it joins
// the call at once.
type jobSpans struct {
	mu      sync.Mutex
	calls   map[string]jobCall
	pending map[string][]EgressDecision
}

type jobCall struct {
	sc trace.SpanContext
	at time.Time
}

// Egress exports one egress decision as a span of its job's call (kept
// until that call is exported, if it has not been).
func (t *Tracer) Egress(d EgressDecision) {
	if t == nil || d.Job == "" {
		return
	}
	t.jobs.mu.Lock()
	c, ok := t.jobs.calls[d.Job]
	if !ok {
		if t.jobs.pending == nil {
			t.jobs.pending = map[string][]EgressDecision{}
		}
		if len(t.jobs.pending[d.Job]) < maxPendingPerJob && len(t.jobs.pending) < maxJobCalls {
			t.jobs.pending[d.Job] = append(t.jobs.pending[d.Job], d)
		}
		t.jobs.mu.Unlock()
		return
	}
	t.jobs.mu.Unlock()
	t.egressSpan(trace.ContextWithSpanContext(context.Background(), c.sc), d)
}

// joined records a job's call span and exports the decisions that waited
// for it.
func (t *Tracer) joined(job string, sc trace.SpanContext, now time.Time) {
	t.jobs.mu.Lock()
	if t.jobs.calls == nil {
		t.jobs.calls = map[string]jobCall{}
	}
	if len(t.jobs.calls) >= maxJobCalls {
		for id, c := range t.jobs.calls {
			if now.Sub(c.at) > jobCallKeep || len(t.jobs.calls) >= maxJobCalls {
				delete(t.jobs.calls, id)
			}
		}
	}
	t.jobs.calls[job] = jobCall{sc: sc, at: now}
	waiting := t.jobs.pending[job]
	delete(t.jobs.pending, job)
	t.jobs.mu.Unlock()
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	for _, d := range waiting {
		t.egressSpan(ctx, d)
	}
}

// egressSpan is one decision's span under ctx's span.
func (t *Tracer) egressSpan(ctx context.Context, d EgressDecision) {
	_, span := t.tracer.Start(ctx, "egress "+d.Host, trace.WithTimestamp(d.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("server.address", d.Host), attribute.Int("server.port", d.Port),
			attribute.Bool("sandboxer.egress.allowed", d.Allowed),
			attribute.Int64("sandboxer.egress.bytes_up", d.BytesUp), attribute.Int64("sandboxer.egress.bytes_down", d.BytesDown),
			attribute.Int("sandboxer.egress.secrets", d.Secrets),
			attribute.String("sandboxer.job.id", d.Job), attribute.String("sandboxer.tenant", d.Tenant)))
	if !d.Allowed {
		span.SetAttributes(attribute.String("sandboxer.egress.reason", d.Reason))
		span.SetStatus(codes.Error, d.Reason)
	}
	span.End(trace.WithTimestamp(d.End))
}
