package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// Helpers of the foundation_* tests. Names carry an "f" prefix so they cannot
// clash with helpers other e2e files add.

// fRun runs a command that must be accepted (any exit status) and returns its result.
func fRun(s *server, args map[string]any) map[string]any {
	s.t.Helper()
	return s.ok("run_command", args)
}

// fFields parses "key=value" lines of a probe script's stdout. A key seen
// twice keeps its last value.
func fFields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && k != "" && !strings.ContainsAny(k, " \t") {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// fNoContainers fails at once if the server has any sandbox container.
func fNoContainers(t *testing.T, s *server, when string) {
	t.Helper()
	if cs := s.containers(); len(cs) != 0 {
		t.Errorf("%s: %d sandbox container(s) of this server still present: %+v", when, len(cs), cs)
	}
}

// fJobs returns list_jobs' jobs.
func fJobs(t *testing.T, s *server) []any {
	t.Helper()
	r := s.ok("list_jobs", map[string]any{})
	jobs, _ := r["jobs"].([]any)
	return jobs
}

// fProcStatusKB reads a "Vm...: N kB" field of /proc/<pid>/status.
func fProcStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("read server's /proc status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse %s line %q: %v", field, line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// fShort shortens long text in failure messages.
func fShort(s string) string {
	if len(s) > 600 {
		return s[:300] + " …[" + strconv.Itoa(len(s)-600) + " bytes]… " + s[len(s)-300:]
	}
	return s
}

// fNum is a numeric result field, 0 when it is absent (omitempty).
func fNum(m map[string]any, key string) float64 {
	v, _ := m[key].(float64)
	return v
}
