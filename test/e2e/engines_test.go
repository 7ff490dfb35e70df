package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/testutil"
)

// The server against engines reached other than through the local socket:
// TCP with TLS (a forwarder the test makes, with certificates it makes), and
// ssh:// (engines_ssh_test.go). Each runs the same core an agent relies on.

// engineCore drives jobs, stdin, a session, a workspace, output and a kill
// through a server started with env, and checks the hardening from inside.
func engineCore(t *testing.T, env ...string) {
	t.Helper()
	s := startServer(t, env...)

	// A job's exit code, both streams and its stdin (the attach stream's write half and its end).
	r := s.ok("run_command", map[string]any{"command": "cat; echo to-stderr >&2; exit 3", "stdin": "from-stdin\n"})
	if str(r, "status") != "failed" || exitCode(t, r) != 3 || str(r, "stdout") != "from-stdin\n" || str(r, "stderr") != "to-stderr\n" {
		t.Fatalf("run_command with stdin: %v", r)
	}

	// Hardening, read from inside the sandbox.
	hardeningFromInside(t, s)

	// A background job: output read while it runs, then killed.
	bg := s.ok("run_command", map[string]any{"command": "i=0; while :; do i=$((i+1)); echo tick$i; sleep 0.2; done", "background": true})
	id := str(bg, "job_id")
	rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "tick3", "wait_s": 20})
	if rd["matched"] != true {
		t.Fatalf("background output: %v", rd)
	}
	k := s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
	if str(k, "status") != "killed" {
		t.Fatalf("kill_job: %v", k)
	}

	// An interactive session with a terminal.
	sess := s.startSession(map[string]any{"command": "bash", "until": `\$ $`})
	sid := str(sess, "job_id")
	out, _ := s.typeLine(sid, "echo sum=$((6*7))", "until", `sum=42`)
	if !strings.Contains(out, "sum=42") {
		t.Fatalf("session answer: %q", out)
	}
	s.ok("kill_job", map[string]any{"job_id": sid, "signal": "KILL", "grace_s": 0})

	// A workspace: files go in through the engine's API and persist across jobs.
	ws := "e2e-engine-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(ws) > 60 {
		ws = ws[:60]
	}
	ws = strings.TrimRight(ws, "-")
	s.createWS(ws, nil)
	s.ok("write_file", map[string]any{"workspace": ws, "path": "note.txt", "content": "kept\n"})
	if got := s.wsOut(ws, "cat note.txt; echo more >> note.txt"); got != "kept\n" {
		t.Fatalf("workspace job read %q", got)
	}
	rf := s.ok("read_file", map[string]any{"workspace": ws, "path": "note.txt"})
	if str(rf, "content") != "kept\nmore\n" {
		t.Fatalf("read_file: %v", rf)
	}
	s.ok("delete_workspace", map[string]any{"name": ws})
	s.waitNoContainers(30 * time.Second)
}

// engineAdoption: a job survives a SIGKILLed server and is adopted by the
// next one, started with the same engine environment.
func engineAdoption(t *testing.T, env ...string) {
	t.Helper()
	adoption(t, func(s *server) { s.waitNoContainers(30 * time.Second) }, env...)
}

// adoption is engineAdoption with noneLeft checking the engine is clean after.
func adoption(t *testing.T, noneLeft func(*server), env ...string) {
	t.Helper()
	s := startServer(t, env...)
	r := s.ok("run_command", map[string]any{"command": "for i in $(seq 1 8); do echo line$i; sleep 1; done; exit 5", "background": true})
	id := str(r, "job_id")
	rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "line2", "wait_s": 20})
	if rd["matched"] != true {
		t.Fatalf("line2 never came before the crash: %v", rd)
	}
	s.kill9()
	s2 := startServerIn(t, s.stateDir, env...)
	g := s2.ok("get_job", map[string]any{"job_id": id, "wait_s": 40})
	if str(g, "status") != "failed" || str(g, "reason") != "exit_code" || exitCode(t, g) != 5 {
		t.Fatalf("after restart: want failed/exit_code/5, got %v\nstderr of the second server:\n%s", g, tail(s2.stderr.String(), 4000))
	}
	out, _ := s2.readAll(id)
	if got := strings.Join(lines(out), ","); got != "line1,line2,line3,line4,line5,line6,line7,line8" {
		t.Fatalf("output after restart: %q", got)
	}
	noneLeft(s2)
}

func TestTLSEngineCore(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	pki := makePKI(t)
	f := startTLSForwarder(t, pki)
	engineCore(t, f.Env()...)
	if f.Verified() == 0 {
		t.Fatal("no connection came through the TLS forwarder: the server did not use the TLS endpoint")
	}
}

func TestTLSEngineRestartAdoption(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	pki := makePKI(t)
	f := startTLSForwarder(t, pki)
	engineAdoption(t, f.Env()...)
	if f.Verified() == 0 {
		t.Fatal("no connection came through the TLS forwarder")
	}
}

// doctor over TLS names the endpoint and says it is remote.
func TestTLSEngineDoctor(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	pki := makePKI(t)
	f := startTLSForwarder(t, pki)
	out, err := runBin(t, f.Env(), "doctor", "--state-dir", t.TempDir())
	if err != nil || !strings.Contains(out, "tcp://"+f.Addr+", remote over tcp+tls") || !strings.Contains(out, "all checks passed") {
		t.Fatalf("doctor over TLS: %v\n%s", err, out)
	}
	if strings.Contains(out, "BEGIN") {
		t.Fatalf("doctor printed certificate material:\n%s", out)
	}
}

// THREATS 51: a TCP engine without TLS verification is refused before any
// connection is made, unless SANDBOXER_ENGINE_INSECURE=1; an engine whose
// certificate is not from the named CA is not trusted; no certificate is logged.
func TestTLSEngineRefusals(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	pki := makePKI(t)
	f := startTLSForwarder(t, pki)
	host := "DOCKER_HOST=tcp://" + f.Addr
	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"no TLS", []string{host}, "without TLS"},
		{"TLS without verification", []string{host, "DOCKER_CERT_PATH=" + pki.ClientDir}, "does not verify the engine's certificate"},
	} {
		out, err := runBin(t, c.env, "serve", "--state-dir", t.TempDir())
		if err == nil || !strings.Contains(out, c.want) || !strings.Contains(out, "SANDBOXER_ENGINE_INSECURE=1") {
			t.Errorf("%s: the server should refuse to start, naming the switch: err %v\n%s", c.name, err, out)
		}
		if strings.Contains(out, "BEGIN") {
			t.Errorf("%s: certificate material in the output:\n%s", c.name, out)
		}
	}
	if n := f.Accepted(); n != 0 {
		t.Fatalf("a refused server still connected to the engine (%d connections)", n)
	}

	// The explicit switch accepts TLS without verification (the engine's
	// certificate is not checked; the forwarder still wants the client's).
	out, err := runBin(t, []string{host, "DOCKER_CERT_PATH=" + pki.ClientDir, "SANDBOXER_ENGINE_INSECURE=1"}, "doctor", "--state-dir", t.TempDir())
	if err != nil || !strings.Contains(out, "remote over tcp,") {
		t.Fatalf("with SANDBOXER_ENGINE_INSECURE=1: %v\n%s", err, out)
	}

	// Another CA's ca.pem: the engine's certificate does not verify.
	other := makePKI(t)
	mixed := t.TempDir()
	for _, name := range []string{"cert.pem", "key.pem"} {
		copyFile(t, filepath.Join(pki.ClientDir, name), filepath.Join(mixed, name))
	}
	copyFile(t, filepath.Join(other.ClientDir, "ca.pem"), filepath.Join(mixed, "ca.pem"))
	out, err = runBin(t, []string{host, "DOCKER_TLS_VERIFY=1", "DOCKER_CERT_PATH=" + mixed}, "doctor", "--state-dir", t.TempDir())
	if err == nil || !strings.Contains(out, "FAIL") || !strings.Contains(out, "certificate") {
		t.Fatalf("an engine certificate from another CA was accepted: %v\n%s", err, out)
	}
	if strings.Contains(out, "BEGIN") {
		t.Fatalf("certificate material in the output:\n%s", out)
	}
}

// runBin runs the sandboxer binary with env added, bounded, with its stdin empty.
func runBin(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("sandboxer %v did not return within 3 minutes:\n%s", args, out)
	}
	return string(out), err
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// hardeningFromInside runs the hardening probe in a fresh sandbox and
// checks what every engine's sandbox must show (loopback only, no route
// out among it); it returns the probe's fields for what is the engine's own.
func hardeningFromInside(t *testing.T, s *server) map[string]string {
	t.Helper()
	h := fRun(s, map[string]any{"command": fHardeningProbe, "env": map[string]any{"PROBE_VAR": "agent-set"}})
	f := fFields(str(h, "stdout"))
	for k, want := range map[string]string{"uid": "1000", "CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
		"netifs": "lo", "routes": "0", "write_tmp": "written", "docker_sock": "", "leaked_env": "", "probe_var": "agent-set"} {
		if f[k] != want {
			t.Errorf("inside the sandbox %s=%q, want %q", k, f[k], want)
		}
	}
	if !strings.HasPrefix(f["rootfs_opts"], "ro,") || f["write_root"] == "written" {
		t.Errorf("root filesystem: options %q, write %q", f["rootfs_opts"], f["write_root"])
	}
	return f
}
