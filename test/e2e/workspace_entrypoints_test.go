package e2e

import (
	"strings"
	"testing"
)

// run_script and start_session run inside a workspace too: they see its
// files, and what they write stays for the next job.
func TestWorkspaceScriptsAndSessions(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.ok("create_workspace", map[string]any{"name": "entry-points", "language": "python"})
	t.Cleanup(func() { s.call("delete_workspace", map[string]any{"name": "entry-points"}) })

	s.ok("run_command", map[string]any{"command": "echo from-command > /workspace/note", "workspace": "entry-points"})
	r := s.ok("run_script", map[string]any{"language": "bash", "code": "cat /workspace/note; echo from-script >> /workspace/note", "workspace": "entry-points"})
	if str(r, "stdout") != "from-command\n" {
		t.Fatalf("bash script in the workspace: %v", r)
	}
	r = s.ok("run_script", map[string]any{"language": "python", "code": "print(open('/workspace/note').read().split())", "workspace": "entry-points"})
	if str(r, "stdout") != "['from-command', 'from-script']\n" {
		t.Fatalf("python script in the workspace: %v", r)
	}
	if msg := s.toolErr("run_script", map[string]any{"language": "go", "code": "package main\nfunc main(){}", "workspace": "entry-points"}); !strings.Contains(msg, "workspace") {
		t.Errorf("a go script in a python workspace: %q", msg)
	}

	sess := s.ok("start_session", map[string]any{"command": "python3", "workspace": "entry-points", "until": ">>> $", "wait_s": 20})
	id := str(sess, "job_id")
	out := s.ok("send_input", map[string]any{"job_id": id, "text": "print(open('/workspace/note').read().count('from'))", "enter": true, "until": "2", "wait_s": 10})
	if !strings.Contains(str(out, "output"), "2") {
		t.Errorf("session in the workspace: %v", out)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL"})
}
