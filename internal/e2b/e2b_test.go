package e2b

import (
	"slices"
	"strings"
	"testing"
)

// TestWorkspacePath: E2B's home and /workspace are the workspace's root;
// any other absolute path is refused.
func TestWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"/home/user/a.txt": "a.txt", "/home/user": ".", "/workspace/x/../y": "y", "notes/a.txt": "notes/a.txt", "/workspace": ".",
	} {
		if got, err := workspacePath(in); err != nil || got != want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/etc/passwd", "/home/userx/a", "/home", "/home/user/../../etc/passwd", "../x"} {
		if got, err := workspacePath(bad); err == nil {
			t.Errorf("workspacePath(%q) = %q, want an error", bad, got)
		}
	}
}

// TestCommandLine: bash -c's script runs as it is; anything else is
// quoted word by word.
func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"/bin/bash", []string{"-l", "-c", "echo $HOME | wc -c"}, "echo $HOME | wc -c"},
		{"python3", []string{"-c", "print('hi there')"}, `python3 -c 'print('\''hi there'\'')'`},
		{"ls", []string{"-la", "/tmp"}, "ls -la /tmp"},
		{"echo", []string{""}, "echo ''"},
	} {
		if got := commandLine(c.cmd, c.args); got != c.want {
			t.Errorf("commandLine(%q, %q) = %q, want %q", c.cmd, c.args, got, c.want)
		}
	}
}

// TestEgressOf: E2B's network options become create_workspace's egress
// (nil: the policy's allowlist; empty: none; hosts: narrowed to them), and
// what sandboxer cannot serve is refused with a sentence naming it.
func TestEgressOf(t *testing.T) {
	no, yes := false, true
	for _, c := range []struct {
		name    string
		allow   *bool
		net     *network
		want    []string
		problem string
	}{
		{"nothing", nil, nil, nil, ""},
		{"internet on", &yes, nil, nil, ""},
		{"internet off", &no, nil, []string{}, ""},
		{"deny all", nil, &network{DenyOut: []string{allTraffic}}, []string{}, ""},
		{"deny all but two", nil, &network{DenyOut: []string{allTraffic}, AllowOut: []string{"pypi.org", "*.github.com"}}, []string{"pypi.org", "*.github.com"}, ""},
		{"internet off but one", &no, &network{AllowOut: []string{"pypi.org"}}, []string{"pypi.org"}, ""},
		{"allow all over deny all", nil, &network{DenyOut: []string{allTraffic}, AllowOut: []string{allTraffic}}, nil, ""},
		{"allow without deny", nil, &network{AllowOut: []string{"pypi.org"}}, nil, "network.allowOut pypi.org without denyOut"},
		{"deny one host", nil, &network{DenyOut: []string{"evil.example"}}, nil, `network.denyOut "evil.example"`},
		{"rules", nil, &network{Rules: []byte(`{"api.example.com":[]}`)}, nil, "network.rules"},
		{"egress proxy", nil, &network{EgressProxy: []byte(`{"address":"p:1"}`)}, nil, "network.egressProxy"},
		{"public traffic", nil, &network{AllowPublicTraffic: &yes}, nil, "network.allowPublicTraffic"},
		{"no public traffic", nil, &network{AllowPublicTraffic: &no}, nil, ""},
	} {
		got, problem := egressOf(c.allow, c.net)
		if !strings.HasPrefix(problem, c.problem) || (c.problem == "") != (problem == "") {
			t.Errorf("%s: problem %q, want one starting %q", c.name, problem, c.problem)
			continue
		}
		if (got == nil) != (c.want == nil) || !slices.Equal(got, c.want) {
			t.Errorf("%s: egress %#v, want %#v", c.name, got, c.want)
		}
	}
}
