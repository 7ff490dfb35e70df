package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Tokens of the e2e token file: one per role the listener tells apart.
const (
	metricsToken = "e2e-metrics-token-0123456789"
	adminToken   = "e2e-admin-token-0123456789ab"
	userToken    = "e2e-user-token-0123456789abc"
)

// metricsEnv is the environment serving /metrics on a free loopback port,
// with a token file for three clients.
func metricsEnv(t *testing.T) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	body := fmt.Sprintf("prom %s metrics\nops %s admin\nalice %s\n", metricsToken, adminToken, userToken)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"SANDBOXER_METRICS_ADDR=127.0.0.1:0", "SANDBOXER_TOKEN_FILE=" + p}
}

var listenLine = regexp.MustCompile(`"addr":"([^"]+)"[^\n]*"message":"serving /metrics"`)

// httpAddr is where the server's listener is (it logs it before serving MCP).
func (s *server) httpAddr() string {
	s.t.Helper()
	// stderr is copied by a goroutine: the line may land a moment after
	// the server answered initialize.
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m = listenLine.FindStringSubmatch(s.stderr.String())
	}
	if m == nil {
		s.t.Fatalf("no 'serving /metrics' line in the log:\n%s", tail(s.stderr.String(), 2000))
	}
	return "http://" + m[1]
}

// scrapeMetrics fetches /metrics with token and parses it with expfmt.
func scrapeMetrics(t *testing.T, base, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample sums a family's samples whose labels include want (histograms
// count observations).
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var sum float64
next:
	for _, m := range fams[name].GetMetric() {
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

// TestMetricsMoveAsJobsRun scrapes /metrics before and after known work: the
// job, tool and block-list families move by what was done, the state
// families are there, and many jobs with distinct commands add no series.
func TestMetricsMoveAsJobsRun(t *testing.T) {
	t.Parallel()
	s := startServer(t, append(metricsEnv(t), policyEnv(t, blockPolicy))...)
	base := s.httpAddr()
	before := scrapeMetrics(t, base, metricsToken)

	s.ok("run_command", map[string]any{"command": "echo hello"})
	s.ok("run_command", map[string]any{"command": "exit 3"})
	s.ok("run_script", map[string]any{"language": "python", "code": "print(6*7)"})
	s.toolErr("run_command", map[string]any{"command": "rm -rf /tmp/x"}) // blocked by blockPolicy
	after := scrapeMetrics(t, base, adminToken)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sandboxer_jobs_started_total", map[string]string{"kind": "command"}, 2},
		{"sandboxer_jobs_started_total", map[string]string{"kind": "script", "language": "python"}, 1},
		{"sandboxer_jobs_ended_total", map[string]string{"kind": "command", "status": "completed"}, 1},
		{"sandboxer_jobs_ended_total", map[string]string{"kind": "command", "status": "failed", "reason": "exit_code"}, 1},
		{"sandboxer_jobs_ended_total", map[string]string{"kind": "script", "status": "completed", "language": "python"}, 1},
		{"sandboxer_sandbox_start_seconds", nil, 3},
		{"sandboxer_job_queue_wait_seconds", nil, 3},
		{"sandboxer_job_run_seconds", nil, 3},
		{"sandboxer_tool_calls_total", map[string]string{"tool": "run_command", "outcome": "ok"}, 2},
		{"sandboxer_tool_calls_total", map[string]string{"tool": "run_command", "outcome": "error"}, 1},
		{"sandboxer_tool_call_duration_seconds", map[string]string{"tool": "run_script"}, 1},
		{"sandboxer_blocklist_decisions_total", map[string]string{"decision": "blocked", "rule": "rm"}, 1},
		{"sandboxer_http_requests_total", map[string]string{"code": "200", "tenant": "prom"}, 1},
	} {
		if d := sample(after, c.name, c.labels) - sample(before, c.name, c.labels); d != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, d, c.want)
		}
	}
	for _, name := range []string{"sandboxer_pool_takes_total", "go_goroutines", "process_resident_memory_bytes"} {
		if after[name] == nil {
			t.Errorf("family %s missing", name)
		}
	}

	// Distinct commands, ids and outputs: not one new series.
	series := func(f map[string]*dto.MetricFamily) (n int) {
		for _, fam := range f {
			if strings.HasPrefix(fam.GetName(), "sandboxer_") {
				n += len(fam.GetMetric())
			}
		}
		return n
	}
	for i := range 12 {
		s.ok("run_command", map[string]any{"command": fmt.Sprintf("echo distinct-%d-%d", i, time.Now().UnixNano())})
	}
	many := scrapeMetrics(t, base, metricsToken)
	// A few series may appear (the admin scrape's tenant, a pool hit after
	// misses); a command or id as a label would add at least 12.
	if a, b := series(after), series(many); b > a+6 {
		t.Errorf("12 jobs with distinct commands added %d series (from %d to %d)", b-a, a, b)
	}
	for _, fam := range many {
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if strings.Contains(l.GetValue(), "distinct-") || l.GetName() == "job_id" {
					t.Errorf("%s carries a command or a job id as a label: %s=%q", fam.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestMetricsRefusedWithoutToken (threat 47): /metrics gives nothing to a
// request without a token, with an unknown one, or with a user's token.
func TestMetricsRefusedWithoutToken(t *testing.T) {
	t.Parallel()
	s := startServer(t, metricsEnv(t)...)
	base := s.httpAddr()
	for token, want := range map[string]int{"": 401, "not-a-token-at-all-000": 401, userToken: 403} {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 64<<10)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		resp.Body.Close()
		if resp.StatusCode != want || strings.Contains(b.String(), "sandboxer_jobs") {
			t.Errorf("token %q: %s, want %d and no metrics", token, resp.Status, want)
		}
	}
}
