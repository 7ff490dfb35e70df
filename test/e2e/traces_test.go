package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a local OTLP/HTTP trace receiver: the spans it was sent,
// with their service's name.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var in collector.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &in) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range in.ResourceSpans {
		name := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				name = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, s)
				r.service = append(r.service, name)
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestTraceparentBecomesSpans: with an OTLP endpoint in the standard
// variables, a tool call whose _meta carries a traceparent comes back at
// the receiver as a span of that trace, child of the client's span, with
// the job's phases under it, its attributes, and no command text.
func TestTraceparentBecomesSpans(t *testing.T) {
	t.Parallel()
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	s := startServer(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=sandboxer-e2e")
	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_command"
	req.Params.Arguments = map[string]any{"command": "echo secret-command-text"}
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "00-" + traceID + "-" + parentID + "-01"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.client.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("run_command: %v %v", err, res)
	}
	jobID := str(structured(t, res), "job_id")

	var call *tracepb.Span
	var children []*tracepb.Span
	var service string
	for deadline := time.Now().Add(15 * time.Second); call == nil || len(children) < 4; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no call span with its phases of trace %s reached the receiver (call %v, %d children)", traceID, call, len(children))
		}
		rcv.mu.Lock()
		call, children = nil, nil
		for i, sp := range rcv.spans {
			if hex.EncodeToString(sp.TraceId) == traceID && hex.EncodeToString(sp.ParentSpanId) == parentID {
				call, service = sp, rcv.service[i]
			}
		}
		for _, sp := range rcv.spans {
			if call != nil && bytes.Equal(sp.ParentSpanId, call.SpanId) {
				children = append(children, sp)
			}
		}
		rcv.mu.Unlock()
	}
	if call.Name != "tools/call run_command" || call.Kind != tracepb.Span_SPAN_KIND_SERVER || service != "sandboxer-e2e" {
		t.Errorf("the call's span: %q kind %v, service %q", call.Name, call.Kind, service)
	}
	attrs := map[string]string{}
	for _, a := range call.Attributes {
		attrs[a.Key] = a.GetValue().GetStringValue()
	}
	if attrs["mcp.tool.name"] != "run_command" || attrs["sandboxer.job.id"] != jobID || attrs["sandboxer.job.status"] != "completed" || attrs["process.exit.code"] != "0" {
		t.Errorf("the call's attributes: %v", attrs)
	}
	names := map[string]bool{}
	for _, c := range children {
		names[c.Name] = true
		if c.StartTimeUnixNano < call.StartTimeUnixNano || c.EndTimeUnixNano > call.EndTimeUnixNano {
			t.Errorf("phase %s [%d, %d] outside its call [%d, %d]", c.Name, c.StartTimeUnixNano, c.EndTimeUnixNano, call.StartTimeUnixNano, call.EndTimeUnixNano)
		}
	}
	for _, want := range []string{"job.record", "sandbox.claim", "job.run", "job.end"} {
		if !names[want] {
			t.Errorf("no %s phase among %v", want, names)
		}
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, sp := range rcv.spans {
		for _, a := range sp.Attributes {
			if strings.Contains(a.GetValue().String(), "secret-command-text") {
				t.Errorf("span %s carries the command text in %s", sp.Name, a.Key)
			}
		}
	}
}

// TestEgressDecisionsBecomeSpans: each decision of the egress proxy comes
// back as a span under the call of the job that made it: an allowed request
// with its host and bytes, a refused one with its reason as an error.
func TestEgressDecisionsBecomeSpans(t *testing.T) {
	t.Parallel()
	gw := egressGateway(t)
	ln, err := net.Listen("tcp", gw+":0")
	if err != nil {
		t.Skipf("cannot listen on the egress network's gateway %s: %v", gw, err)
	}
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })}
	go web.Serve(ln)
	t.Cleanup(func() { web.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	s := startServer(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100",
		policyEnv(t, fmt.Sprintf("pool:\n  enabled: false\nnetwork: egress\negress:\n  allow: [\"mirror.sbx.test:%s\"]\n  hosts:\n    mirror.sbx.test: %s\n", port, gw)))
	const traceID, parentID = "1af7651916cd43dd8448eb211c80319d", "c7ad6b7169203332"
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_command"
	req.Params.Arguments = map[string]any{"language": "python", "timeout_s": 60, "command": fmt.Sprintf(`python3 - <<'EOF'
import urllib.request
for url in ["http://mirror.sbx.test:%s/", "http://denied.sbx.test/"]:
    try:
        print(urllib.request.urlopen(url, timeout=10).read().decode())
    except Exception as e:
        print("refused")
EOF`, port)}
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "00-" + traceID + "-" + parentID + "-01"}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.client.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("run_command: %v %v", err, res)
	}
	if out := str(structured(t, res), "stdout"); out != "hello\nrefused\n" {
		t.Fatalf("the job's requests: %q", out)
	}
	var allowed, refused *tracepb.Span
	for deadline := time.Now().Add(15 * time.Second); allowed == nil || refused == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the egress spans did not reach the receiver (allowed %v, refused %v)", allowed, refused)
		}
		rcv.mu.Lock()
		var call *tracepb.Span
		for _, sp := range rcv.spans {
			if hex.EncodeToString(sp.TraceId) == traceID && hex.EncodeToString(sp.ParentSpanId) == parentID {
				call = sp
			}
		}
		for _, sp := range rcv.spans {
			if call == nil || !bytes.Equal(sp.ParentSpanId, call.SpanId) {
				continue
			}
			switch sp.Name {
			case "egress mirror.sbx.test":
				allowed = sp
			case "egress denied.sbx.test":
				refused = sp
			}
		}
		rcv.mu.Unlock()
	}
	attrs := func(sp *tracepb.Span) map[string]string {
		m := map[string]string{}
		for _, a := range sp.Attributes {
			m[a.Key] = a.GetValue().String()
		}
		return m
	}
	if a := attrs(allowed); !strings.Contains(a["sandboxer.egress.allowed"], "true") || !strings.Contains(a["server.port"], port) || allowed.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the allowed request's span: %v %v", a, allowed.Status)
	}
	if a := attrs(refused); !strings.Contains(a["sandboxer.egress.allowed"], "false") || refused.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(refused.Status.GetMessage(), "denied.sbx.test") {
		t.Errorf("the refused request's span: %v %v", a, refused.Status)
	}
}
