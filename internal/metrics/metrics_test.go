package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// tokens is a fixed Authenticator for the tests.
type tokens map[string][2]string

func (t tokens) Authenticate(tok string) (string, string, bool) {
	v, ok := t[tok]
	return v[0], v[1], ok
}

var testTokens = tokens{"scrape": {"prom", "metrics"}, "admin": {"ops", "admin"}, "user": {"alice", "user"}}

// scrape fetches /metrics as tok and parses it with expfmt.
func scrape(t *testing.T, url, tok string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scrape as %q: %s", tok, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value sums the samples of a family whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func newServer(t *testing.T, src Sources) (*Metrics, string) {
	m := New(map[string]string{"img/python": "python"})
	srv := httptest.NewServer(m.CountRequests(testTokens, m.Scrape(testTokens, src)))
	t.Cleanup(srv.Close)
	return m, srv.URL + "/metrics"
}

func TestFamiliesPresentAndMoving(t *testing.T) {
	m, url := newServer(t, Sources{
		LiveJobs: func() map[[2]string]int {
			return map[[2]string]int{{"session", "running"}: 2, {"command", "queued"}: 1}
		},
		Workspaces: func(context.Context) (map[string]int, error) { return map[string]int{"running": 3}, nil },
		PoolReady:  func() map[string]int { return map[string]int{"img/python": 2, "img/unknown": 1} },
		Caches: func(context.Context) ([]Cache, error) {
			return []Cache{{"python", 1000}, {"python", 24}, {"javascript", -1}}, nil
		},
	})
	before := scrape(t, url, "scrape")

	m.JobStarted("command", "bash", 10*time.Millisecond, 200*time.Millisecond)
	m.JobEnded("command", "bash", "completed", "", time.Second)
	m.JobEnded("script", "python", "failed", "exit_code", 2*time.Second)
	m.ToolCall("run_command", false, 30*time.Millisecond)
	m.ToolCall("run_command", true, 5*time.Millisecond)
	m.PoolTake("img/python", true)
	m.PoolTake("img/python", false)
	m.Install("pip", true)
	m.Install("deps-python", false)
	m.BlockDecision(true, "rm")
	m.BlockDecision(false, "")
	m.EngineError("create container")
	after := scrape(t, url, "admin")

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sandboxer_jobs_started_total", map[string]string{"kind": "command", "language": "bash"}, 1},
		{"sandboxer_jobs_ended_total", map[string]string{"status": "completed", "reason": "none"}, 1},
		{"sandboxer_jobs_ended_total", map[string]string{"status": "failed", "reason": "exit_code", "language": "python"}, 1},
		{"sandboxer_job_queue_wait_seconds", map[string]string{"kind": "command"}, 1},
		{"sandboxer_sandbox_start_seconds", map[string]string{"kind": "command"}, 1},
		{"sandboxer_job_run_seconds", nil, 2},
		{"sandboxer_tool_calls_total", map[string]string{"tool": "run_command", "outcome": "error"}, 1},
		{"sandboxer_tool_call_duration_seconds", map[string]string{"tool": "run_command"}, 2},
		{"sandboxer_pool_takes_total", map[string]string{"language": "python", "result": "hit"}, 1},
		{"sandboxer_pool_takes_total", map[string]string{"language": "python", "result": "miss"}, 1},
		{"sandboxer_package_installs_total", map[string]string{"manager": "deps-python", "outcome": "failed"}, 1},
		{"sandboxer_blocklist_decisions_total", map[string]string{"decision": "blocked", "rule": "rm"}, 1},
		{"sandboxer_engine_errors_total", map[string]string{"operation": "create container"}, 1},
		// The first scrape's request, counted once it was answered.
		{"sandboxer_http_requests_total", map[string]string{"code": "200", "tenant": "prom"}, 1},
	} {
		if d := value(after, c.name, c.labels) - value(before, c.name, c.labels); d != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, d, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sandboxer_jobs_live", map[string]string{"kind": "session", "status": "running"}, 2},
		{"sandboxer_workspaces", map[string]string{"state": "running"}, 3},
		{"sandboxer_pool_warm_sandboxes", map[string]string{"language": "python"}, 2},
		{"sandboxer_pool_warm_sandboxes", map[string]string{"language": "other"}, 1},
		{"sandboxer_dependency_caches", map[string]string{"language": "python"}, 2},
		{"sandboxer_dependency_cache_bytes", map[string]string{"language": "python"}, 1024},
		{"sandboxer_dependency_caches", map[string]string{"language": "javascript"}, 1},
	} {
		if got := value(after, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if after[name] == nil {
			t.Errorf("family %s missing (Go and process collectors)", name)
		}
	}
}

// TestCardinalityBounded (threat 49): a source that names a new value each time (an
// agent's block-list entries, a runaway tool name) costs a bounded number of
// series, and a job id never becomes a label.
func TestCardinalityBounded(t *testing.T) {
	m, url := newServer(t, Sources{})
	for i := range 10000 {
		m.BlockDecision(true, fmt.Sprintf("cmd%d", i))
		m.ToolCall(fmt.Sprintf("tool%d", i), false, time.Millisecond)
		m.JobEnded("command", fmt.Sprintf("lang%d", i), "completed", fmt.Sprintf("reason%d", i), time.Millisecond)
	}
	fams := scrape(t, url, "scrape")
	for name, max := range map[string]int{
		"sandboxer_blocklist_decisions_total": maxLabelValues + 1,
		"sandboxer_tool_calls_total":          maxLabelValues + 1,
		"sandboxer_jobs_ended_total":          maxLabelValues + 1,
	} {
		if n := len(fams[name].GetMetric()); n > max {
			t.Errorf("%s has %d series after 10,000 distinct values, want <= %d", name, n, max)
		}
	}
	if got := value(fams, "sandboxer_blocklist_decisions_total", map[string]string{"rule": Other}); got != 10000-maxLabelValues {
		t.Errorf("values past the bound counted as %q: %v, want %d", Other, got, 10000-maxLabelValues)
	}
	for _, f := range fams {
		for _, mt := range f.Metric {
			for _, l := range mt.Label {
				if l.GetName() == "job_id" || l.GetName() == "command" {
					t.Errorf("%s has label %s", f.GetName(), l.GetName())
				}
			}
		}
	}
}

// TestScrapeRefusedWithoutToken: threat 47 (metrics read by anyone who can
// reach the port): no token, a wrong one or a user's token gets no numbers.
func TestScrapeRefusedWithoutToken(t *testing.T) {
	_, url := newServer(t, Sources{})
	for tok, want := range map[string]int{"": 401, "nope": 401, "user": 403} {
		req, _ := http.NewRequest("GET", url, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		resp.Body.Close()
		if resp.StatusCode != want || strings.Contains(b.String(), "sandboxer_") {
			t.Errorf("token %q: %s %q, want %d and no metrics", tok, resp.Status, b.String(), want)
		}
	}
}
