package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

// The server with `backend: kubernetes` on the cluster of `make k8s-cluster`:
// `make test-k8s` runs these with SANDBOXER_TEST_K8S=1 and KUBECONFIG naming
// the cluster (as its sandboxer service account, in namespace sandboxer).

// kubernetesPolicy is the policy of these tests. The node has 2 CPUs and a
// pod's CPU request equals its limit: a quarter CPU each lets the warm pod,
// jobs and a session fit at once; one warm pod (bash) and no more, since
// list_languages' probes would otherwise have the pool follow every image.
const kubernetesPolicy = `backend: kubernetes
kubernetes:
  kubeconfig: %s
limits:
  cpus:
    default: 0.25
pool:
  size: {bash: 1, python: 0}
  max_total: 1
`

// kubernetesEnv skips outside make test-k8s, and otherwise returns the
// environment of a server on the cluster.
func kubernetesEnv(t *testing.T) []string {
	t.Helper()
	return kubernetesEnvWith(t, "")
}

// kubernetesEnvWith is kubernetesEnv with more policy (YAML appended).
func kubernetesEnvWith(t *testing.T, extra string) []string {
	t.Helper()
	return []string{policyEnv(t, kubernetesPolicyFor(t)+extra)}
}

// kubernetesPolicyFor skips outside make test-k8s, and otherwise returns
// kubernetesPolicy for the cluster.
func kubernetesPolicyFor(t *testing.T) string {
	t.Helper()
	if os.Getenv("SANDBOXER_TEST_K8S") != "1" {
		t.Skip("skipping: Kubernetes tests run under `make test-k8s` (SANDBOXER_TEST_K8S=1, KUBECONFIG naming the cluster)")
	}
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		t.Fatal("SANDBOXER_TEST_K8S=1 needs KUBECONFIG (make test-k8s sets it)")
	}
	return fmt.Sprintf(kubernetesPolicy, kc)
}

// pods lists this server instance's pods on the cluster; warm ones too when all.
func (s *server) pods(all bool) []sandbox.Container {
	s.t.Helper()
	rt, err := kubernetes.New((&config.Config{StateDir: s.stateDir}).Instance(), kubernetes.Config{})
	if err != nil {
		s.t.Fatal(err)
	}
	defer rt.Close()
	return s.listOn(rt, all)
}

// waitNoPods waits until the instance has no pods left (warm ones too when all).
func (s *server) waitNoPods(all bool, within time.Duration) { s.waitNoneOn(s.pods, all, within) }

// kubernetesProbe adds to the hardening probe what only a pod could leak:
// a service account token, a default route, and a resolver (the cluster's
// DNS would answer any name: a pod gets none).
const kubernetesProbe = fHardeningProbe + `
echo "sa_token=$(ls -d /var/run/secrets/kubernetes.io /run/secrets/kubernetes.io 2>/dev/null | tr '\n' ' ')"
echo "default_route=$(awk '$2=="00000000"' /proc/net/route | wc -l)"
echo "nameservers=$(awk '$1=="nameserver"{print $2}' /etc/resolv.conf | paste -sd' ')"
echo "lookup=$(getent hosts sandboxer-probe.example.com >/dev/null 2>&1 && echo resolved || echo none)"
`

func TestKubernetesCore(t *testing.T) {
	kubernetesCore(t, startServer(t, kubernetesEnv(t)...))
}

// The same on the default policy (1 CPU a pod, a warm pool of bash 2 and
// python 1, 4 jobs at once) on the cluster's 2 CPUs: more than fits. Warm
// pods give their room back to jobs, and jobs beyond it wait in the queue
// instead of failing.
func TestKubernetesCoreDefaultPolicy(t *testing.T) {
	kubernetesPolicyFor(t) // skips outside make test-k8s
	kc := os.Getenv("KUBECONFIG")
	kubernetesCore(t, startServer(t, policyEnv(t, "backend: kubernetes\nkubernetes:\n  kubeconfig: "+kc+"\n")))
}

// kubernetesCore: exit codes and streams, another language, the hardening
// from inside, a background job, a deadline, a session, the languages and a
// warm pod serving a job.
func kubernetesCore(t *testing.T, s *server) {

	// A job's exit code, both streams and its stdin.
	r := s.ok("run_command", map[string]any{"command": "cat; echo to-stderr >&2; exit 3", "stdin": "from-stdin\n"})
	if str(r, "status") != "failed" || exitCode(t, r) != 3 || str(r, "stdout") != "from-stdin\n" || str(r, "stderr") != "to-stderr\n" {
		t.Fatalf("run_command with stdin: %v", r)
	}
	// A script in another language (a cold pod of its image).
	sc := s.ok("run_script", map[string]any{"language": "python", "code": "print(6*7)"})
	if str(sc, "status") != "completed" || str(sc, "stdout") != "42\n" {
		t.Fatalf("run_script python: %v", sc)
	}

	// Hardening, read from inside the pod.
	h := fRun(s, map[string]any{"command": kubernetesProbe, "env": map[string]any{"PROBE_VAR": "agent-set"}})
	f := fFields(str(h, "stdout"))
	for k, want := range map[string]string{"uid": "1000", "CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
		"write_tmp": "written", "docker_sock": "", "leaked_env": "", "probe_var": "agent-set", "sa_token": "", "default_route": "0",
		"nameservers": "0.0.0.0", "lookup": "none"} {
		if f[k] != want {
			t.Errorf("inside the pod %s=%q, want %q", k, f[k], want)
		}
	}
	if !strings.HasPrefix(f["rootfs_opts"], "ro,") || f["write_root"] == "written" {
		t.Errorf("root filesystem: options %q, write %q", f["rootfs_opts"], f["write_root"])
	}
	// The test cluster's CNI gives a pod lo and a dead-end eth0 (docs/kubernetes.md).
	if nif := f["netifs"]; nif != "lo" && nif != "eth0 lo" {
		t.Errorf("inside the pod netifs=%q, want lo (and the dead-end eth0)", nif)
	}
	if f["connect"] == "connected" || f["connect"] == "" {
		t.Errorf("a connect to 1.1.1.1:80 from the pod: %q", f["connect"])
	}

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

	// The job's deadline.
	to := s.ok("run_command", map[string]any{"command": "sleep 1000", "timeout_s": 2})
	if str(to, "status") != "timed_out" {
		t.Fatalf("want timed_out, got %v", to)
	}

	// An interactive session with a terminal.
	sess := s.startSession(map[string]any{"command": "bash", "until": `\$ $`})
	sid := str(sess, "job_id")
	out, _ := s.typeLine(sid, "echo sum=$((6*7))", "until", `sum=42`)
	if !strings.Contains(out, "sum=42") {
		t.Fatalf("session answer: %q", out)
	}
	s.ok("kill_job", map[string]any{"job_id": sid, "signal": "KILL", "grace_s": 0})

	// Languages are probed through the runtime.
	if txt := text(s.call("list_languages", map[string]any{})); !strings.Contains(txt, "bash") || !strings.Contains(txt, "python") {
		t.Errorf("list_languages: %s", txt)
	}

	// The warm pool keeps a pod through the runtime's Warmer: a job runs in
	// it. (A pod listed is not yet ready while it starts: a job then runs
	// cold and leaves the warm one, so a few tries, bounded.)
	served := false
	for try := 0; try < 10 && !served; try++ {
		warm := s.waitWarmOn(s.pods)
		r = s.ok("run_command", map[string]any{"command": "echo warm"})
		g := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
		served = str(g, "container_id") == warm
		if !served {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if !served {
		t.Errorf("no job ran in a warm pod in 10 tries\nstderr:\n%s", tail(s.stderr.String(), 3000))
	}

	s.waitNoPods(false, 30*time.Second)
	s.stop()
	s.waitNoPods(true, 30*time.Second)
}

// On the default policy, a job that finds no room on the node waits in the
// queue, saying why in the scheduler's words, and runs once the job that
// holds the node ends; one asking more CPUs than any node has is refused
// at once, naming cpus.
func TestKubernetesWaitsForRoom(t *testing.T) {
	kubernetesPolicyFor(t)
	kc := os.Getenv("KUBECONFIG")
	s := startServer(t, policyEnv(t, "backend: kubernetes\nkubernetes:\n  kubeconfig: "+kc+"\nlimits:\n  cpus: {default: 1, max: 4}\n"))

	big := s.call("run_command", map[string]any{"command": "true", "cpus": 4})
	if !big.IsError || !strings.Contains(text(big), "cpus 4 is more than any node") {
		t.Fatalf("a job asking 4 CPUs of a 2-CPU node: %s", text(big))
	}

	holder := s.ok("run_command", map[string]any{"command": "echo holding; sleep 600", "cpus": 2, "timeout_s": 300, "background": true})
	hid := str(holder, "job_id")
	if rd := s.ok("read_output", map[string]any{"job_id": hid, "until": "holding", "wait_s": 50}); rd["matched"] != true {
		t.Fatalf("the job holding the node did not start: %v %v\nstderr:\n%s", holder, rd, tail(s.stderr.String(), 3000))
	}
	w := s.call("run_command", map[string]any{"command": "echo placed", "wait_s": 5})
	r := structured(t, w)
	if str(r, "status") != "queued" || !strings.Contains(text(w), "Insufficient cpu") {
		t.Fatalf("a job while another holds the node: %s", text(w))
	}
	t.Logf("the queued answer: %s", text(w))
	wid := str(r, "job_id")
	s.ok("kill_job", map[string]any{"job_id": hid, "signal": "KILL", "grace_s": 0})
	done := s.ok("get_job", map[string]any{"job_id": wid, "wait_s": 50})
	for i := 0; i < 3 && (str(done, "status") == "queued" || str(done, "status") == "running"); i++ {
		done = s.ok("get_job", map[string]any{"job_id": wid, "wait_s": 50})
	}
	if str(done, "status") != "completed" {
		t.Fatalf("the job that waited for room: %v\nstderr:\n%s", done, tail(s.stderr.String(), 3000))
	}
	if q, _ := done["queued_ms"].(float64); q < 1000 {
		t.Errorf("queued_ms %v: want the wait for room counted", done["queued_ms"])
	}
	out := s.ok("read_output", map[string]any{"job_id": wid})
	if !strings.Contains(str(out, "output"), "placed") {
		t.Errorf("its output: %v", out)
	}
	s.stop()
	s.waitNoPods(true, 60*time.Second)
}

// A job survives a SIGKILLed server: the next one adopts its pod and reads
// what it printed meanwhile from the container's log.
func TestKubernetesRestartAdoption(t *testing.T) {
	env := kubernetesEnv(t)
	adoption(t, func(s *server) {
		s.waitNoPods(false, 30*time.Second)
		s.stop()
		s.waitNoPods(true, 30*time.Second)
	}, env...)
}

// doctor on backend kubernetes names the API server and namespace, finds the
// images on the node and reads a pod's hardening from inside.
func TestKubernetesDoctor(t *testing.T) {
	env := kubernetesEnv(t)
	out, err := runBin(t, env, "doctor", "--state-dir", t.TempDir())
	if err != nil || !strings.Contains(out, "all checks passed") || !strings.Contains(out, "namespace sandboxer answers") ||
		!strings.Contains(out, "sa_token=absent") || !strings.Contains(out, "default_route=0") {
		t.Fatalf("doctor on kubernetes: %v\n%s", err, out)
	}
}

// list_processes and kill_process on backend kubernetes: a job's processes
// with the pod's pids (the supervisor is pid 1, refused), one killed.
func TestKubernetesProcesses(t *testing.T) {
	env := kubernetesEnv(t)
	s := startServer(t, env...)
	id := str(s.ok("run_command", map[string]any{"command": "sleep 301 & sleep 302 & wait", "background": true, "timeout_s": 120}), "job_id")
	procs := func() []map[string]any {
		t.Helper()
		var out []map[string]any
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			r := s.call("list_processes", map[string]any{"job_id": id})
			if !r.IsError {
				out = nil
				for _, p := range structured(t, r)["jobs"].([]any)[0].(map[string]any)["processes"].([]any) {
					out = append(out, p.(map[string]any))
				}
				if strings.Contains(mustJSON(out), `"command":"sleep 302"`) {
					return out
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("job %s: no sleep process listed: %v", id, out)
		return nil
	}
	ps := procs()
	target := 0
	for _, p := range ps {
		if str(p, "command") == "sleep 301" {
			target = int(p["pid"].(float64))
		}
		if p["pid"].(float64) == 1 && str(p, "role") != "supervisor" {
			t.Errorf("pid 1 in the pod: %v", p)
		}
		if p["user"] == "root" {
			t.Errorf("a process runs as root: %v", p)
		}
	}
	if target == 0 {
		t.Fatalf("no sleep 301 in %v", ps)
	}
	if msg := s.toolErr("kill_process", map[string]any{"job_id": id, "pid": 1}); !strings.Contains(msg, "supervisor") {
		t.Errorf("pid 1: %q", msg)
	}
	s.ok("kill_process", map[string]any{"job_id": id, "pid": target, "signal": "KILL"})
	deadline := time.Now().Add(20 * time.Second)
	for strings.Contains(mustJSON(procs()), `"command":"sleep 301"`) {
		if time.Now().After(deadline) {
			t.Fatalf("sleep 301 (pid %d) still listed after kill_process", target)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if all := s.ok("list_processes", map[string]any{}); len(all["jobs"].([]any)) != 1 {
		t.Errorf("list_processes of all jobs: %v", all)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
	s.waitNoPods(false, 30*time.Second)
	s.stop()
	s.waitNoPods(true, 30*time.Second)
}

// kubernetesAPI is the cluster KUBECONFIG names: its address and an HTTP
// client with the kubeconfig's credentials (the tests' service account),
// loaded once for every test that reads the cluster.
var kubernetesAPI = sync.OnceValues(func() (kubeAPI, error) {
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return kubeAPI{}, err
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return kubeAPI{}, err
	}
	hc.Timeout = 30 * time.Second
	return kubeAPI{host: strings.TrimSuffix(rc.Host, "/"), client: hc}, nil
})

type kubeAPI struct {
	host   string
	client *http.Client
}

// kubernetesList lists resource ("pods", "persistentvolumeclaims") in the
// tests' namespace, those matching selector ("" = all), into list: a plain GET
// on the API, so the tests need no typed client.
func kubernetesList(t *testing.T, resource, selector string, list any) {
	t.Helper()
	api, err := kubernetesAPI()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := api.client.Get(api.host + "/api/v1/namespaces/sandboxer/" + resource + "?" + url.Values{"labelSelector": {selector}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		t.Fatalf("list %s: %s: %s", resource, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(list); err != nil {
		t.Fatalf("list %s: %v", resource, err)
	}
}

// kubernetesClaimsOf lists the persistent volume claims of one server
// instance ("" = all) in the namespace (the tests' service account may read them).
func kubernetesClaimsOf(t *testing.T, instance string) []string {
	t.Helper()
	var l corev1.PersistentVolumeClaimList
	kubernetesList(t, "persistentvolumeclaims", "", &l)
	var names []string
	for _, c := range l.Items {
		if instance == "" || c.Annotations["dev.sandboxer/instance"] == instance {
			names = append(names, c.Name)
		}
	}
	return names
}

// claims lists the claims of this server's instance (others' tests share
// the namespace).
func (s *server) claims() []string {
	s.t.Helper()
	cfg := config.Config{StateDir: s.stateDir}
	return kubernetesClaimsOf(s.t, cfg.Instance())
}

// Workspaces on backend kubernetes: a claim and a pod; files written and
// read, jobs in it, a job surviving a server crash, processes, an idle stop
// (pod deleted, files kept) and a start; nothing left
// after delete_workspace.
func TestKubernetesWorkspace(t *testing.T) {
	env := kubernetesEnvWith(t, "workspaces:\n  idle_stop_s: 4\n")
	s := startServer(t, env...)
	name := "k8s-ws"
	before := len(s.claims()) // others' tests share the namespace
	r := s.ok("create_workspace", map[string]any{"name": name, "language": "python"})
	if str(r["workspace"].(map[string]any), "state") != "running" {
		t.Fatalf("create_workspace: %v", r)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted && !t.Failed() {
			s.call("delete_workspace", map[string]any{"name": name})
		}
	})
	if n := len(s.claims()); n != before+1 {
		t.Fatalf("%d claims after create_workspace, want %d", n, before+1)
	}

	s.ok("write_file", map[string]any{"workspace": name, "path": "src/note.txt", "content": "hello k8s\n"})
	if rd := s.ok("read_file", map[string]any{"workspace": name, "path": "src/note.txt"}); str(rd, "content") != "hello k8s\n" {
		t.Fatalf("read_file: %v", rd)
	}
	if l := s.ok("list_files", map[string]any{"workspace": name, "path": "src"}); !strings.Contains(mustJSON(l), "note.txt") {
		t.Fatalf("list_files: %v", l)
	}
	if out := s.wsOut(name, "cat src/note.txt; pwd; id -u; grep CapEff /proc/self/status"); out != "hello k8s\n/workspace\n1000\nCapEff:\t0000000000000000\n" {
		t.Fatalf("a job in the workspace: %q", out)
	}

	// A script and a terminal session in the workspace.
	if sc := s.ok("run_script", map[string]any{"language": "python", "workspace": name, "code": "print(open('src/note.txt').read().upper(), end='')"}); str(sc, "stdout") != "HELLO K8S\n" {
		t.Fatalf("run_script in the workspace: %v", sc)
	}
	sess := str(s.startSession(map[string]any{"command": "bash", "workspace": name, "until": `\$ $`}), "job_id")
	if out, _ := s.typeLine(sess, "echo n=$(wc -l < src/note.txt)", "until", `n=1`); !strings.Contains(out, "n=1") {
		t.Fatalf("a session in the workspace: %q", out)
	}
	s.ok("kill_job", map[string]any{"job_id": sess, "signal": "KILL", "grace_s": 0})

	// What changed since creation, read through pods/exec of the supervisor.
	if ch := s.ok("workspace_changes", map[string]any{"workspace": name}); !strings.Contains(str(ch, "diff"), "+hello k8s") {
		t.Fatalf("workspace_changes: %v", ch)
	}

	// A port of the workspace on a loopback URL, relayed over pods/exec.
	s.ok("run_command", map[string]any{"workspace": name, "background": true,
		"command": "cd src && exec python3 -m http.server 8000 --bind 127.0.0.1"})
	var port map[string]any
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		port = s.ok("expose_port", map[string]any{"workspace": name, "port": 8000})
		if port["listening"] == true || time.Now().After(deadline) {
			break
		}
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(str(port, "url") + "note.txt")
	if err != nil {
		t.Fatalf("GET through the relay (%v): %v", port, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello k8s\n" {
		t.Fatalf("GET through the relay: %s %q", resp.Status, body)
	}

	// Processes of a workspace job: the pod's, the daemon at pid 1.
	sleeper := str(s.wsRun(name, "sleep 1001", "background", true), "job_id")
	deadline := time.Now().Add(30 * time.Second)
	// A background job's sandbox may still be starting: list_processes
	// says so as a tool error, and the loop asks again.
	listed := func() string {
		if res := s.call("list_processes", map[string]any{"job_id": sleeper}); !res.IsError {
			return mustJSON(structured(t, res))
		}
		return ""
	}
	for !strings.Contains(listed(), `"command":"sleep 1001"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no sleep 1001 in the workspace's processes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if k := s.ok("kill_job", map[string]any{"job_id": sleeper}); str(k, "status") != "killed" {
		t.Fatalf("kill_job in the workspace: %v", k)
	}

	// A job outlives a SIGKILLed server: the next re-attaches it.
	id := str(s.wsRun(name, "for i in $(seq 1 6); do echo line$i; sleep 0.5; done; exit 7", "background", true), "job_id")
	if rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "line2", "wait_s": 30}); rd["matched"] != true {
		t.Fatalf("line2 never came before the crash: %v", rd)
	}
	s.kill9()
	s = startServerIn(t, s.stateDir, env...)
	if g := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 50}); str(g, "status") != "failed" || exitCode(t, g) != 7 {
		t.Fatalf("after the restart: %v", g)
	}
	if out, _ := s.readAll(id); out != "line1\nline2\nline3\nline4\nline5\nline6\n" {
		t.Fatalf("output across the restart: %q", out)
	}

	// Idle: the pod is deleted, the claim kept; the next job starts it again.
	deadline = time.Now().Add(60 * time.Second)
	for str(s.ok("list_workspaces", nil)["workspaces"].([]any)[0].(map[string]any), "state") != "stopped" {
		if time.Now().After(deadline) {
			t.Fatal("workspace not stopped after idling")
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range s.pods(true) {
		if p.Kind == "workspace" {
			t.Fatalf("the idle workspace's pod is still there: %+v", p)
		}
	}
	if out := s.wsOut(name, "cat src/note.txt"); out != "hello k8s\n" {
		t.Fatalf("after an idle stop: %q", out)
	}

	s.ok("delete_workspace", map[string]any{"name": name})
	deleted = true
	deadline = time.Now().Add(30 * time.Second)
	for len(s.claims()) != before {
		if time.Now().After(deadline) {
			t.Fatalf("claims left after delete_workspace: %v", s.claims())
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.waitNoPods(false, 30*time.Second)
	s.stop()
	s.waitNoPods(true, 30*time.Second)
}

// Installs on backend kubernetes go through the tunnel from an install pod
// (no network, the workspace's claim) to the server's proxy: npm installs a
// real package from the npm registry that a job then requires offline; a
// package index on a private address is refused (any public host is the
// default install list); with workspaces.install_network: egress, the
// policy's list names that index and pip installs from it; apt installs
// without root, into the claim. No install pod is left.
func TestKubernetesInstall(t *testing.T) {
	if _, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", "registry.npmjs.org"); err != nil {
		t.Skipf("the npm registry does not resolve here: %v", err)
	}
	index := pipIndex(t) // on the docker bridge's gateway: a private address
	u, err := url.Parse(index)
	if err != nil {
		t.Fatal(err)
	}
	env := kubernetesEnvWith(t, "workspaces:\n"+installCAKey(t)+"  pip_index_url: "+index+"\n")
	s := startServer(t, env...)
	name := "k8s-npm"
	s.createWS(name, map[string]any{"language": "javascript"})
	r := s.ok("install_packages", map[string]any{"workspace": name, "packages": []any{"is-number@7.0.0"}})
	if r["installed"] != true {
		t.Fatalf("npm install through the tunnel: %v", r)
	}
	if out := s.wsOut(name, `node -e 'console.log(require("is-number")(5))'; env | grep -ci _proxy || true`); out != "true\n0\n" {
		t.Fatalf("a job requiring the installed package: %q", out)
	}
	// apt without root: sqlite3 and the two libraries it needs, unpacked
	// into the claim, found by the workspace's jobs and by no one else's.
	r = s.ok("install_packages", map[string]any{"workspace": name, "packages": []any{"sqlite3"}, "manager": "apt"})
	if r["installed"] != true || !strings.HasPrefix(str(r["packages"].([]any)[0].(map[string]any), "version"), "3.") {
		t.Fatalf("apt install through the tunnel: %v", r)
	}
	if out := s.wsOut(name, `echo 'select 1+2;' | sqlite3; command -v sqlite3; stat -c %u /workspace/.apt/root/usr/bin/sqlite3; ls /workspace/.apt`); out != "3\n/workspace/.apt/root/usr/bin/sqlite3\n1000\nroot\nstatus\n" {
		t.Fatalf("a job running the apt-installed sqlite3: %q", out)
	}
	lc := s.ok("list_commands", map[string]any{"workspace": name})
	if !slices.Contains(lc["commands"].([]any), any("sqlite3")) || !strings.Contains(fmt.Sprint(lc["packages"]), "libsqlite3-0 ") {
		t.Fatalf("list_commands after the apt install: commands %v, packages %v", lc["command_count"], lc["packages"])
	}
	if r := s.ok("install_packages", map[string]any{"workspace": name, "packages": []any{"sqlite3"}, "manager": "apt"}); r["installed"] != true || !strings.Contains(fmt.Sprint(r), "already") {
		t.Fatalf("apt install of a package unpacked before: %v", r)
	}
	if r := s.ok("run_command", map[string]any{"command": "command -v sqlite3 || echo none"}); str(r, "stdout") != "none\n" {
		t.Fatalf("a fresh job after the workspace's apt install: %v", r)
	}
	r, msg := s.failedWith("install_packages", map[string]any{"workspace": name, "packages": []any{"no-such-package-sbx"}, "manager": "apt"})
	if r["installed"] != false || !strings.Contains(msg, "no-such-package-sbx") {
		t.Fatalf("apt install of a package that does not exist: %s %v", msg, r)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	name = "k8s-pip-private"
	s.createWS(name, map[string]any{"language": "python"})
	r, pipMsg := s.failedWith("install_packages", map[string]any{"workspace": name, "packages": []any{"sbxdemo==1.2.3"}})
	if r["installed"] != false {
		t.Fatalf("pip from a private address: %v", r)
	}
	var npmAllowed, privateRefused bool
	for _, e := range egressAudit(t, s) {
		npmAllowed = npmAllowed || e["decision"] == "allowed" && e["host"] == "registry.npmjs.org"
		privateRefused = privateRefused || e["decision"] == "refused" && e["host"] == u.Hostname()
	}
	if !npmAllowed || !privateRefused {
		t.Fatalf("audit: npm allowed %v, private index refused %v: %v\npip: %s %v", npmAllowed, privateRefused, egressAudit(t, s), pipMsg, r)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	s.waitNoPods(false, 30*time.Second)
	s.stop()

	// The policy's list: its index by a pinned name.
	env = kubernetesEnvWith(t, fmt.Sprintf(`workspaces:
  install_network: egress
  pip_index_url: http://mirror.sbx.test:%[1]s/simple
egress:
  allow: ["mirror.sbx.test:%[1]s"]
  hosts:
    mirror.sbx.test: %[2]s
`, u.Port(), u.Hostname()))
	s = startServer(t, env...)
	name = "k8s-pip"
	s.createWS(name, map[string]any{"language": "python"})
	if r := s.ok("install_packages", map[string]any{"workspace": name, "packages": []any{"sbxdemo==1.2.3"}}); r["installed"] != true {
		t.Fatalf("pip install through the tunnel: %v", r)
	}
	if out := s.wsOut(name, `python3 -c "import sbxdemo; print(sbxdemo.answer())"`); out != "42\n" {
		t.Fatalf("after the pip install: %q", out)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	s.waitNoPods(false, 30*time.Second)
	s.stop()
	s.waitNoPods(true, 30*time.Second)
}

// Granted mounts on backend kubernetes: a job's mount is a copy of the
// granted directory, taken by the server at the job's start into the pod's
// /mnt (links as links, the FIFO left out, files 0444 and directories 0555);
// a write the job forces on its copy never reaches the host; mounts past
// kubernetes.mount_mb are refused, naming mounts; create_workspace's import
// copies the tree into the claim, and workspace_changes gives a fix back as
// a patch. No pod or claim is left.
func TestKubernetesMounts(t *testing.T) {
	src, secret := calcFixture(t)
	big := t.TempDir()
	f, err := os.Create(filepath.Join(big, "huge.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 << 20); err != nil { // sparse: past mount_mb
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chmod(big, 0o755); err != nil {
		t.Fatal(err)
	}
	pol := strings.Replace(kubernetesPolicyFor(t), "kubernetes:\n", "kubernetes:\n  mount_mb: 1\n", 1) +
		"mounts:\n  - {name: calc, source: " + src + "}\n  - {name: big, source: " + big + "}\nworkspaces:\n  disk_mb: 4\n"
	s := startServer(t, policyEnv(t, pol))
	before := len(s.claims())

	r := s.ok("run_command", map[string]any{"mounts": []any{"calc"}, "command": `cd /mnt/calc && head -1 calc.go; ls -A | sort | tr '\n' ' '; echo
stat -c '%a %u' . calc.go docs; readlink secret-link; cat secret-link 2>&1 | grep -c HOST-SECRET
echo x > new 2>/dev/null && echo WROTE; echo x >> calc.go 2>/dev/null && echo APPENDED
chmod u+w . calc.go && echo forced >> calc.go && echo x > new && echo WROTE-COPY`})
	want := "package calc\ncalc.go calc_test.go docs go.mod logo.bin old.txt secret-link \n555 1000\n444 1000\n555 1000\n" +
		secret + "\n0\nWROTE-COPY\n"
	if out := str(r, "stdout"); out != want {
		t.Fatalf("a job with the mount: %q (%v), want %q", out, r, want)
	}
	if _, err := os.Stat(filepath.Join(src, "new")); err == nil {
		t.Fatal("a job's write reached the granted host directory")
	}
	if b, _ := os.ReadFile(filepath.Join(src, "calc.go")); strings.Contains(string(b), "forced") {
		t.Fatal("a job's write reached a host file")
	}
	// A second job gets a fresh copy.
	if out := str(s.ok("run_command", map[string]any{"mounts": []any{"calc"}, "command": "tail -1 /mnt/calc/calc.go; ls /mnt/calc/new 2>&1 | grep -c 'No such'"}), "stdout"); out != "}\n1\n" {
		t.Fatalf("the next job's copy: %q", out)
	}
	// Without mounts, /mnt is the image's.
	if out := str(s.ok("run_command", map[string]any{"command": "ls /mnt 2>&1 | wc -l"}), "stdout"); strings.TrimSpace(out) != "0" {
		t.Fatalf("a job without mounts sees /mnt: %q", out)
	}
	// Past kubernetes.mount_mb: refused before any pod, naming mounts.
	res := s.call("run_command", map[string]any{"mounts": []any{"big"}, "command": "true"})
	if msg := text(res); !strings.Contains(msg, "mounts: big") || !strings.Contains(msg, "kubernetes.mount_mb=1") {
		t.Fatalf("a mount past the limit: %s", msg)
	}

	// Import: the tree in the claim, the FIFO skipped and listed, the link a link.
	name := "k8s-import"
	created := s.ok("create_workspace", map[string]any{"name": name, "language": "python", "import": "calc"})
	deleted := false
	t.Cleanup(func() {
		if !deleted && !t.Failed() {
			s.call("delete_workspace", map[string]any{"name": name})
		}
	})
	if origin, _ := created["origin"].(map[string]any); origin == nil || str(origin, "import") != "calc" || !strings.Contains(mustJSON(origin["skipped"]), `"pipe"`) {
		t.Fatalf("import's origin: %v", created)
	}
	if out := s.wsOut(name, "ls -A | sort | tr '\\n' ' '; readlink secret-link; stat -c '%a %u' calc.go"); strings.Contains(out, hostSecret) ||
		!strings.Contains(out, "calc.go") || strings.Contains(out, "pipe") || !strings.Contains(out, "644 1000") {
		t.Fatalf("the imported tree: %q", out)
	}
	s.wsOut(name, "sed -i 's/a - b/a + b/' calc.go && printf 'fixed Add\\n' > NOTES.md && rm old.txt")
	diff, changes := readChanges(t, s, name, 0)
	for _, want := range []string{"diff --git a/calc.go b/calc.go", "-\treturn a - b", "+\treturn a + b", "--- /dev/null\n+++ b/NOTES.md", "deleted file mode 100644"} {
		if !strings.Contains(diff, want) {
			t.Fatalf("patch lacks %q:\n%s", want, diff)
		}
	}
	if len(changes) != 3 || strings.Contains(diff, hostSecret) {
		t.Fatalf("changes: %v, want calc.go modified, NOTES.md added, old.txt deleted\n%s", changes, diff)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	deleted = true

	// A workspace's own mounts: a copy in its pod at /mnt/NAME, taken when
	// the pod starts; writes never reach the host.
	mounted := "k8s-wsmount"
	s.ok("create_workspace", map[string]any{"name": mounted, "language": "python", "mounts": []any{"calc"}})
	if out := s.wsOut(mounted, "head -1 /mnt/calc/calc.go; stat -c '%a %u' /mnt/calc/calc.go; echo x > /mnt/calc/new 2>/dev/null && echo WROTE; chmod u+w /mnt/calc && echo x > /mnt/calc/new && echo WROTE-COPY"); out != "package calc\n444 1000\nWROTE-COPY\n" {
		t.Fatalf("a workspace's mount: %q", out)
	}
	if _, err := os.Stat(filepath.Join(src, "new")); err == nil {
		t.Fatal("a workspace job's write reached the granted host directory")
	}
	s.ok("delete_workspace", map[string]any{"name": mounted})
	// A workspace's mounts past kubernetes.mount_mb: refused, nothing made.
	if msg := s.toolErr("create_workspace", map[string]any{"name": "k8s-wsbig", "mounts": []any{"big"}}); !strings.Contains(msg, "kubernetes.mount_mb=1") {
		t.Fatalf("a workspace's mount past the limit: %q", msg)
	}
	// An import past workspaces.disk_mb makes nothing.
	if msg := s.toolErr("create_workspace", map[string]any{"name": "k8s-big", "import": "big"}); !strings.Contains(msg, "disk_mb") || !strings.Contains(msg, "nothing was made") {
		t.Fatalf("an import past the quota: %q", msg)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(s.claims()) != before {
		if time.Now().After(deadline) {
			t.Fatalf("claims left after delete_workspace: %v", s.claims())
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.waitNoPods(false, 30*time.Second)
	s.stop()
	s.waitNoPods(true, 30*time.Second)
}

// runtime: runsc on backend kubernetes sets the pods' runtimeClassName: a
// job runs under gVisor and reads its
// hardening from inside; a job with a granted mount and a workspace run
// there too. No pod or claim is left.
func TestKubernetesGVisor(t *testing.T) {
	pol := kubernetesPolicyFor(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README"), []byte("the user's project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, policyEnv(t, pol+"runtime: runsc\nmounts:\n  - {name: project, source: "+src+"}\n"))
	before := len(s.claims())
	res := s.call("run_command", map[string]any{"command": "cat /proc/version; " + kubernetesProbe})
	if msg := text(res); strings.Contains(msg, `RuntimeClass "runsc" not found`) {
		t.Skipf("skipping: the cluster has no RuntimeClass runsc (bash scripts/k8s-cluster.sh gvisor makes it): %s", msg)
	}
	r := structured(t, res)
	out := str(r, "stdout")
	if str(r, "status") != "completed" || !strings.Contains(out, "gvisor") {
		t.Fatalf("a job under runsc: %v", r)
	}
	t.Logf("probe under gVisor:\n%s", out)
	// gVisor is its own kernel: Seccomp and NoNewPrivs are the Sentry's
	// business (the host's filter applies to it), the read-only root
	// refuses with EACCES; the rest is as under runc.
	f := fFields(out)
	if f["uid"] != "1000" || f["CapEff"] != "0000000000000000" || f["write_root"] == "written" || f["write_etc"] == "written" ||
		f["write_tmp"] != "written" || f["connect"] == "connected" || f["routes"] != "0" || f["sa_token"] != "" ||
		f["default_route"] != "0" || f["docker_sock"] != "" {
		t.Fatalf("hardening under gVisor: %v", f)
	}
	if out := str(s.ok("run_command", map[string]any{"mounts": []any{"project"}, "command": "cat /mnt/project/README; grep -c gvisor /proc/version"}), "stdout"); out != "the user's project\n1\n" {
		t.Fatalf("a mount under gVisor: %q", out)
	}
	s.ok("create_workspace", map[string]any{"name": "k8s-gvisor", "language": "bash"})
	if out := s.wsOut("k8s-gvisor", "echo hi > f; cat f; grep -c gvisor /proc/version"); out != "hi\n1\n" {
		t.Fatalf("a workspace under gVisor: %q", out)
	}
	s.ok("delete_workspace", map[string]any{"name": "k8s-gvisor"})
	deadline := time.Now().Add(30 * time.Second)
	for len(s.claims()) != before {
		if time.Now().After(deadline) {
			t.Fatalf("claims left after delete_workspace: %v", s.claims())
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.waitNoPods(false, 30*time.Second)
	s.stop()
	s.waitNoPods(true, 30*time.Second)
}
