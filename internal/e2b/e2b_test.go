package e2b

import "testing"

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
