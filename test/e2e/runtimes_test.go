package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// TestSnapshotsRunOnTheirRuntime: with snapshots.runtime, a job and a
// workspace started from a snapshot run on that runtime, as the engine's
// record of their containers says, while a plain job keeps the policy's;
// list_languages shows it. The two runtimes are the engine's runc and the
// patched sandboxer-runc the setup registers (or runsc, where make gvisor
// registered it).
func TestSnapshotsRunOnTheirRuntime(t *testing.T) {
	testutil.RequireDocker(t)
	t.Parallel()
	runtimes, _ := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	snapRT := "runc"
	if strings.Contains(string(runtimes), `"runsc"`) {
		snapRT = "runsc"
	} else if !strings.Contains(string(runtimes), `"sandboxer-runc"`) {
		// make test's setup registers sandboxer-runc where the host's runc
		// has known escapes (every Debian bookworm host).
		t.Skip("the engine has one runtime only (no sandboxer-runc, no runsc): nothing to tell apart")
	}
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	snap, ws, dst := "rtsnap"+sfx, "rtsrc"+sfx, "rtdst"+sfx
	removeTemplateImages(t, snap)
	cleanupWorkspace(t, ws)
	cleanupWorkspace(t, dst)
	s := startServer(t, "SANDBOXER_TOOLSETS=all", policyEnv(t, "snapshots:\n  runtime: "+snapRT+"\n"))

	s.ok("create_workspace", map[string]any{"name": ws})
	if got := containerRuntime(t, "label="+sandbox.LabelWorkspace+"="+ws); got == snapRT {
		t.Fatalf("a plain workspace runs on %s, the snapshots' runtime", got)
	}
	s.ok("write_file", map[string]any{"workspace": ws, "path": "kept.txt", "content": "kept\n"})
	s.ok("snapshot_workspace", map[string]any{"workspace": ws, "template": snap})

	bg := s.ok("run_command", map[string]any{"language": snap, "command": "cat kept.txt; sleep 60", "background": true})
	id := str(bg, "job_id")
	s.waitJob(id, "running", 60*time.Second)
	if got := containerRuntime(t, "id="+jobContainer(t, s, id)); got != snapRT {
		t.Errorf("a job from the snapshot runs on %q, want %q (snapshots.runtime)", got, snapRT)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})

	plain := s.ok("run_command", map[string]any{"command": "sleep 60", "background": true})
	pid := str(plain, "job_id")
	s.waitJob(pid, "running", 60*time.Second)
	if got := containerRuntime(t, "id="+jobContainer(t, s, pid)); got == snapRT {
		t.Errorf("a plain job runs on %q, the snapshots' runtime", got)
	}
	s.ok("kill_job", map[string]any{"job_id": pid, "signal": "KILL", "grace_s": 0})

	s.ok("create_workspace", map[string]any{"name": dst, "language": snap})
	if got := containerRuntime(t, "label="+sandbox.LabelWorkspace+"="+dst); got != snapRT {
		t.Errorf("a workspace from the snapshot runs on %q, want %q", got, snapRT)
	}
	if out := s.wsOut(dst, "cat kept.txt"); out != "kept\n" {
		t.Errorf("the workspace from the snapshot: %q", out)
	}
	langs := s.ok("list_languages", map[string]any{})
	found := false
	for _, l := range langs["languages"].([]any) {
		if m := l.(map[string]any); m["name"] == snap {
			found = true
			if m["runtime"] != snapRT {
				t.Errorf("list_languages shows the snapshot's runtime as %v, want %s", m["runtime"], snapRT)
			}
		}
	}
	if !found {
		t.Errorf("list_languages does not list %s: %v", snap, langs)
	}
}

// containerRuntime is the runtime the engine records for the one
// container that filter finds (HostConfig.Runtime), waiting for it.
func containerRuntime(t *testing.T, filter string) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		out, _ := exec.Command("docker", "ps", "-q", "--filter", filter).Output()
		if cid := strings.TrimSpace(string(out)); cid != "" && !strings.Contains(cid, "\n") {
			rt, err := exec.Command("docker", "inspect", "--format", "{{.HostConfig.Runtime}}", cid).Output()
			if err == nil {
				return strings.TrimSpace(string(rt))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no single container for %s", filter)
	return ""
}

// jobContainer is a running job's container, as get_job names it once the
// container has started.
func jobContainer(t *testing.T, s *server, id string) string {
	t.Helper()
	for i := 0; i < 300; i++ {
		if cid := str(s.ok("get_job", map[string]any{"job_id": id}), "container_id"); cid != "" {
			return cid
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %s names no container within 30 s: %v", id, s.ok("get_job", map[string]any{"job_id": id}))
	return ""
}

// TestCallTimelineLogged: at debug level the server logs where a call's
// time went, from its line's arrival to its answer's write, with the
// supervisor's own stamps between (what bench -trace reads).
func TestCallTimelineLogged(t *testing.T) {
	testutil.RequireDocker(t)
	t.Parallel()
	s := startServer(t, "SANDBOXER_LOG_LEVEL=debug")
	r := s.ok("run_command", map[string]any{"command": "echo hi"})
	id := str(r, "job_id")
	var line string
	for i := 0; i < 50 && line == ""; i++ {
		for _, l := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(l, `"call timeline"`) && strings.Contains(l, "job="+id) {
				line = l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if line == "" {
		t.Fatalf("no call timeline logged for job %s:\n%s", id, tail(s.stderr.String(), 3000))
	}
	for _, mark := range []string{"tool=run_command", " handler=", " recorded=", " sandbox_started=", " sv_spec=", " sv_started=",
		" sv_first_output=", " sv_exited=", " sv_exit=", " exit_seen=", " end_recorded=", " handler_returned=", " answer_written="} {
		if !strings.Contains(line, mark) {
			t.Errorf("the timeline has no %q: %s", strings.TrimSpace(mark), line)
		}
	}
}
