package program

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// prestartProgram is a prestarted program that says it runs, then prints the
// job it is handed and copies its stdin.
func prestartProgram(m string) proto.Prestart {
	return proto.Prestart{
		Argv:     []string{"bash", "-c", `echo "early $$ ${` + proto.PrestartFDEnv + `:-none}"; cat <&3; echo; exec cat`, "prestart-" + m},
		EarlyEnv: []string{"LC_*", "SANDBOXER_TEST_EARLY"},
	}
}

func startPrestarted(t *testing.T, pre proto.Prestart) *client {
	t.Helper()
	b, err := json.Marshal(pre)
	if err != nil {
		t.Fatal(err)
	}
	return startSupervisorArgs(t, proto.PrestartCommand, string(b))
}

func TestPrestartTakesAMatchingJob(t *testing.T) {
	m := marker(1)
	pre := prestartProgram(m)
	c := startPrestarted(t, pre)
	dir := t.TempDir()
	s := proto.Spec{Argv: append(slices.Clone(pre.Argv), "one arg", "two"), Env: []string{"FOO=bar baz"}, InheritEnv: true,
		Cwd: dir, Stdin: proto.StdinPipe, KillMode: proto.KillTree}
	c.sendJSON(proto.TypeSpec, s)
	c.send(proto.TypeData, []byte("hello stdin\n"))
	c.send(proto.TypeEOF, nil)
	exit := c.wait(20 * time.Second)
	if exit.ExitCode != 0 || exit.Error != "" {
		t.Fatalf("exit %+v; stderr %q", exit, c.stderr.String())
	}
	lines := strings.SplitN(c.stdout.String(), "\n", 3)
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "early ") {
		t.Fatalf("stdout %q: want the prestarted process's own line, its job, then stdin", c.stdout.String())
	}
	if pid, _ := strconv.Atoi(strings.Fields(lines[0])[1]); pid != c.started.PID || !strings.HasSuffix(lines[0], " 3") {
		t.Errorf("Started.PID %d, want the prestarted process %d", c.started.PID, pid)
	}
	var job proto.PrestartJob
	if err := json.Unmarshal([]byte(lines[1]), &job); err != nil {
		t.Fatalf("job line %q: %v", lines[1], err)
	}
	if !slices.Equal(job.Argv, s.Argv) || job.Cwd != dir || !slices.Contains(job.Env, "FOO=bar baz") {
		t.Errorf("job %+v, want argv %q, cwd %s and FOO in env", job, s.Argv, dir)
	}
	if !slices.Contains(job.Env, "PATH="+os.Getenv("PATH")) {
		t.Errorf("job env lacks the inherited PATH: %q", job.Env)
	}
	if slices.ContainsFunc(job.Env, func(kv string) bool { return strings.HasPrefix(kv, proto.PrestartFDEnv+"=") }) {
		t.Errorf("job env carries %s: %q", proto.PrestartFDEnv, job.Env)
	}
	if lines[2] != "hello stdin\n" {
		t.Errorf("stdin reached the job as %q", lines[2])
	}
	assertGone(t, m)
}

func TestPrestartRefusesOtherJobs(t *testing.T) {
	for name, edit := range map[string]func(*proto.Spec){
		"another command":   func(s *proto.Spec) { s.Argv = []string{"bash", "-c", "echo fresh; cat"} },
		"early env differs": func(s *proto.Spec) { s.Env = append(s.Env, "SANDBOXER_TEST_EARLY=1") },
		"early env pattern": func(s *proto.Spec) { s.Env = append(s.Env, "LC_SANDBOXER_TEST=x") },
		"stdin closed":      func(s *proto.Spec) { s.Stdin = proto.StdinClosed },
		"rlimits":           func(s *proto.Spec) { s.Rlimits = map[string]uint64{"nofile": 256} },
	} {
		t.Run(name, func(t *testing.T) {
			m := marker(2)
			pre := prestartProgram(m)
			c := startPrestarted(t, pre)
			s := proto.Spec{Argv: slices.Clone(pre.Argv), InheritEnv: true, Stdin: proto.StdinPipe, KillMode: proto.KillTree}
			edit(&s)
			c.sendJSON(proto.TypeSpec, s)
			if s.Stdin == proto.StdinPipe {
				c.send(proto.TypeEOF, nil)
			}
			exit := c.wait(20 * time.Second)
			if exit.ExitCode != 0 || exit.Error != "" {
				t.Fatalf("exit %+v; stderr %q", exit, c.stderr.String())
			}
			if !strings.Contains(c.stdout.String(), "fresh") && !strings.Contains(c.stdout.String(), " none\n") {
				t.Errorf("stdout %q: the prestarted process ran the job", c.stdout.String())
			}
			if !strings.Contains(c.diag.String(), "prestarted process not used") {
				t.Errorf("supervisor log %q does not say why the prestarted process was not used", c.diag.String())
			}
			assertGone(t, m)
		})
	}
}

func TestPrestartThatEndedIsNotUsed(t *testing.T) {
	m := marker(3)
	pre := proto.Prestart{Argv: []string{"bash", "-c", "exit 0", "prestart-" + m}}
	c := startPrestarted(t, pre)
	// Wait until it has ended (a zombie child of the supervisor): no timing assumed.
	for !hasZombieChild(c.cmd.Process.Pid, "bash") {
		time.Sleep(10 * time.Millisecond)
	}
	s := proto.Spec{Argv: append(slices.Clone(pre.Argv), "x"), InheritEnv: true, Stdin: proto.StdinPipe, KillMode: proto.KillTree}
	c.sendJSON(proto.TypeSpec, s)
	c.send(proto.TypeEOF, nil)
	exit := c.wait(20 * time.Second)
	if exit.ExitCode != 0 || !strings.Contains(c.diag.String(), "has ended") {
		t.Fatalf("exit %+v; supervisor log %q: want a fresh run of the job", exit, c.diag.String())
	}
}

func TestPrestartDiscardedWithoutAJob(t *testing.T) {
	m := marker(4)
	// A program that outlives the end of its input: only the kill ends it.
	c := startPrestarted(t, proto.Prestart{Argv: []string{"bash", "-c", "sleep 1000; :", "prestart-" + m}})
	c.closeInput()
	exit := c.wait(20 * time.Second)
	if exit.ExitCode != codeBadSpec {
		t.Fatalf("exit %+v, want %d", exit, codeBadSpec)
	}
	assertGone(t, m)
}

func TestEarlyEnvDiff(t *testing.T) {
	pat, late := []string{"NODE_*", "TZ"}, []string{"NODE_PATH"}
	for _, tc := range []struct {
		a, b []string
		want string
	}{
		// A late variable (read again after the hand-over) may differ.
		{nil, []string{"NODE_PATH=/deps/node_modules"}, ""},
		{[]string{"NODE_PATH=/a"}, []string{"NODE_PATH=/b", "NODE_OPTIONS=-r x"}, "NODE_OPTIONS"},
		{[]string{"PATH=/a", "NODE_X=1"}, []string{"PATH=/b", "NODE_X=1"}, ""},
		{[]string{"NODE_X=1"}, []string{"NODE_X=2"}, "NODE_X"},
		{nil, []string{"TZ=UTC"}, "TZ"},
		{[]string{"TZ=UTC"}, nil, "TZ"},
		{[]string{"TZ=UTC", "TZ=CET"}, []string{"TZ=CET"}, ""},
		{[]string{"TZX=1"}, nil, ""},
	} {
		if got := earlyEnvDiff(pat, late, tc.a, tc.b); got != tc.want {
			t.Errorf("earlyEnvDiff(%q, %q) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

// hasZombieChild says whether a child of pid named comm has ended and is not
// reaped yet. The name matters: the Go runtime's first StartProcess forks a
// short-lived child of its own to check CLONE_PIDFD (os.checkClonePidfd), and
// that zombie, seen before the prestarted process even starts, once made this
// test hand the job to a process that was still running.
func hasZombieChild(pid int, comm string) bool {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			stat, err := os.ReadFile("/proc/" + f + "/stat")
			if err == nil && strings.Contains(string(stat), "("+comm+")") && !running(c) {
				return true
			}
		}
	}
	return false
}
