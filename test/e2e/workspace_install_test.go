package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// install_packages end to end: npm and apt from the real registries, the
// network only while installing.

// installPolicy is a policy for install tests: this host's intercepting CAs
// (if any) handed to the installers, a short idle stop.
func installPolicy(t *testing.T, extra string) string {
	t.Helper()
	y := "pool:\n  enabled: false\nworkspaces:\n  idle_stop_s: 3\n" + installCAKey(t)
	return policyEnv(t, y+extra)
}

// installCAKey is the workspaces.install_ca_file line (under workspaces:)
// naming this machine's extra CAs, when it has any: its traffic to
// registries may pass a TLS-inspecting proxy.
func installCAKey(t *testing.T) string {
	t.Helper()
	certs, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt")
	if len(certs) == 0 {
		return ""
	}
	var pem []byte
	for _, c := range certs {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(append(pem, b...), '\n')
	}
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return "  install_ca_file: " + f + "\n"
}

// wsNetworks lists the networks a workspace's container is on ("none", its
// network mode, and its install containers, labelled with its name too,
// left out).
func wsNetworks(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{if ne $k \"none\"}}{{$k}} {{end}}{{end}}' $(docker ps -aq --filter label=dev.sandboxer.kind=workspace --filter label=dev.sandboxer.workspace="+name+")").CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestWorkspaceInstallPackages(t *testing.T) {
	t.Parallel()
	s := startServer(t, installPolicy(t, ""))
	name := "e2e-install"
	s.createWS(name, map[string]any{"language": "javascript"})

	// Invalid names are refused before anything runs.
	for _, c := range []map[string]any{
		{"packages": []any{"is-number; touch /tmp/x"}},
		{"packages": []any{"--registry=http://x"}},
		{"packages": []any{"../x"}},
		{"packages": []any{"requests; touch /tmp/x"}, "manager": "pip"},
		{"packages": []any{"--index-url=http://x"}, "manager": "pip"},
		{"packages": []any{"-r /etc/passwd"}, "manager": "pip"},
		{"by_manager": map[string]any{"apt": []any{"jq", "-o=APT::x"}}},
		{"by_manager": map[string]any{"brew": []any{"jq"}}},
		{"packages": []any{}},
	} {
		c["workspace"] = name
		msg := s.toolErr("install_packages", c)
		if !strings.Contains(msg, "not valid") && !strings.Contains(msg, "unknown package manager") && !strings.Contains(msg, "empty") {
			t.Fatalf("install_packages %v: %s", c, msg)
		}
	}
	if out := s.wsOut(name, "ls node_modules 2>&1 | head -1; ls /sys/class/net"); !strings.Contains(out, "No such file") || !strings.HasSuffix(out, "lo\n") {
		t.Fatalf("after refused installs: %q", out)
	}

	// npm (auto for javascript): a later job requires it.
	start := time.Now()
	r := s.ok("install_packages", map[string]any{"workspace": name, "packages": []any{"is-number@7.0.0"}})
	t.Logf("npm install took %v", time.Since(start))
	p := r["packages"].([]any)[0].(map[string]any)
	if r["installed"] != true || str(p, "manager") != "npm" || str(p, "version") != "7.0.0" || p["installed"] != true {
		t.Fatalf("npm install: %v", r)
	}
	if out := s.wsOut(name, `node -e "console.log(require('is-number')(5))"`); out != "true\n" {
		t.Fatalf("require after install: %q", out)
	}
	if nets := wsNetworks(t, name); nets != "" {
		t.Fatalf("after the install the workspace is still on %q", nets)
	}
	if out := s.wsOut(name, "ls /sys/class/net; timeout 5 bash -c 'echo > /dev/tcp/registry.npmjs.org/443' 2>/dev/null && echo CONNECTED || echo refused"); out != "lo\nrefused\n" {
		t.Fatalf("network after an install: %q", out)
	}

	// apt and npm in one call; a failing package is reported, not installed.
	start = time.Now()
	r = s.ok("install_packages", map[string]any{"workspace": name, "by_manager": map[string]any{
		"apt": []any{"sqlite3"}, "npm": []any{"is-odd"}}})
	t.Logf("apt+npm install took %v", time.Since(start))
	got := map[string]map[string]any{}
	for _, x := range r["packages"].([]any) {
		m := x.(map[string]any)
		got[str(m, "manager")+":"+str(m, "name")] = m
	}
	if r["installed"] != true || got["apt:sqlite3"]["installed"] != true || str(got["apt:sqlite3"], "version") == "" || got["npm:is-odd"]["installed"] != true {
		t.Fatalf("by_manager install: %v", r)
	}
	// apt's downloads never pass where a job can write: a job cannot plant
	// the directory they move into.
	if out := s.wsOut(name, "mkdir /var/cache/sandboxer-apt-inbox 2>/dev/null && echo planted || echo refused"); out != "refused\n" {
		t.Fatalf("a job planting apt's download directory: %q", out)
	}
	// ... and the install cleaned up after itself (on Podman too, whose
	// archive API gives copied files to the workspace's user).
	if out := s.wsOut(name, "ls -d /var/cache/sandboxer-apt* 2>&1 || true"); !strings.Contains(out, "No such file") {
		t.Fatalf("apt's downloads left in the workspace: %q", out)
	}
	if out := s.wsOut(name, `sqlite3 --version; node -e "console.log(require('is-odd')(3), require('is-number')(1))"`); !strings.HasPrefix(out, "3.") || !strings.HasSuffix(out, "true true\n") {
		t.Fatalf("after by_manager: %q", out)
	}
	if nets := wsNetworks(t, name); nets != "" {
		t.Fatalf("after the second install the workspace is still on %q", nets)
	}
	r, msg := s.failedWith("install_packages", map[string]any{"workspace": name, "manager": "apt", "packages": []any{"no-such-package-sbx"}})
	if !strings.Contains(msg, "no-such-package-sbx") {
		t.Errorf("the tool error does not name the missing package: %q", msg)
	}
	if r["installed"] != false || r["packages"].([]any)[0].(map[string]any)["installed"] != false || len(r["managers"].([]any)[0].(map[string]any)["log_tail"].([]any)) == 0 {
		t.Fatalf("missing apt package: %v", r)
	}
	if nets := wsNetworks(t, name); nets != "" {
		t.Fatalf("after a failed install the workspace is still on %q", nets)
	}
	// The install ran and failed: the audit log says failed, not refused.
	if log, err := os.ReadFile(filepath.Join(s.stateDir, "audit.log")); err != nil || !strings.Contains(string(log), `"decision":"allowed","outcome":"failed"`) {
		t.Fatalf("the failed install's audit line (want decision allowed, outcome failed): %v\n%s", err, log)
	}

	// Idle stop, then start: the packages are still there.
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := s.ok("list_workspaces", nil)
		if str(l["workspaces"].([]any)[0].(map[string]any), "state") == "stopped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace not stopped: %v", l)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out := s.wsOut(name, `sqlite3 --version >/dev/null && node -e "require('is-number')" && echo both`); out != "both\n" {
		t.Fatalf("after a stop and start: %q", out)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
}
