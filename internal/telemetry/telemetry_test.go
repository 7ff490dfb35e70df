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
