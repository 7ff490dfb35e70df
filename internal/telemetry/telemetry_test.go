package telemetry

import (
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandboxer/sandboxer/internal/observe"
)

// TestExportPhases: a call's marks become the call's span and a child span
// per phase whose both marks it has (a workspace restored for the call
// included), timed by them; a phase missing a mark is left out.
func TestExportPhases(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := &Tracer{tp: tp, tracer: tp.Tracer("test")}
	start := time.Now()
	tl := observe.NewTimeline(start)
	tl.Note("tool", "run_command")
	at := func(name string, ms int) { tl.MarkAt(name, start.Add(time.Duration(ms)*time.Millisecond)) }
	at("handler", 0)
	at("ws_restore", 1)
	at("ws_restored", 701)
	at("recorded", 702)
	at("fork_checkpoint", 703) // no fork_checkpointed: no span
	tr.Export(tl)
	spans := exp.GetSpans()
	var names []string
	var call, restore tracetest.SpanStub
	for _, s := range spans {
		names = append(names, s.Name)
		switch s.Name {
		case "tools/call run_command":
			call = s
		case "workspace.restore":
			restore = s
		}
	}
	slices.Sort(names)
	if want := []string{"job.record", "tools/call run_command", "workspace.restore"}; !slices.Equal(names, want) {
		t.Fatalf("spans %q, want %q", names, want)
	}
	if restore.Parent.SpanID() != call.SpanContext.SpanID() || restore.EndTime.Sub(restore.StartTime) != 700*time.Millisecond {
		t.Fatalf("workspace.restore: parent %v (call %v), %v long", restore.Parent.SpanID(), call.SpanContext.SpanID(), restore.EndTime.Sub(restore.StartTime))
	}
}

// TestEgressSpans: a decision made while its job's call still runs waits for
// the call's span and becomes its child; one made after it joins at once; a
// refused one says why, as an error status.
func TestEgressSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := &Tracer{tp: tp, tracer: tp.Tracer("test")}
	start := time.Now()
	tr.Egress(EgressDecision{Job: "j1", Host: "pypi.org", Port: 443, Allowed: true, BytesDown: 1000, Start: start, End: start.Add(8 * time.Second)})
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans before the call was exported", n)
	}
	tl := observe.NewTimeline(start)
	tl.Note("tool", "run_command")
	tl.Note("job", "j1")
	tl.MarkAt("handler", start)
	tl.MarkAt("answer_written", start.Add(9*time.Second))
	tr.Export(tl)
	tr.Egress(EgressDecision{Job: "j1", Host: "evil.example", Port: 443, Reason: "evil.example is not on the allowlist", Start: start, End: start})
	tr.Egress(EgressDecision{Job: "other", Host: "x", Start: start, End: start}) // no call: kept, not exported
	var call tracetest.SpanStub
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
		if s.Name == "tools/call run_command" {
			call = s
		}
	}
	allowed, refused := byName["egress pypi.org"], byName["egress evil.example"]
	if allowed.Parent.SpanID() != call.SpanContext.SpanID() || refused.Parent.SpanID() != call.SpanContext.SpanID() {
		t.Fatalf("egress spans' parents %v %v, want the call %v", allowed.Parent.SpanID(), refused.Parent.SpanID(), call.SpanContext.SpanID())
	}
	if allowed.EndTime.Sub(allowed.StartTime) != 8*time.Second || refused.Status.Description != "evil.example is not on the allowlist" {
		t.Errorf("allowed %v long; refused status %+v", allowed.EndTime.Sub(allowed.StartTime), refused.Status)
	}
	if len(exp.GetSpans()) != 3 {
		t.Errorf("%d spans, want the call and two decisions", len(exp.GetSpans()))
	}
}
