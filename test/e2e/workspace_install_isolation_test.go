package e2e

import (
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// An install lends the network to the install alone: a job already running
// in the workspace while an install runs never sees an interface but lo.

// installContainerNetworks lists the networks of a workspace's install
// containers (none when no install runs).
func installContainerNetworks(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "ids=$(docker ps -q --filter label=dev.sandboxer.kind=helper --filter label=dev.sandboxer.workspace="+name+
		"); [ -z \"$ids\" ] || docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' $ids").CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestWorkspaceJobNeverSeesTheInstallNetwork(t *testing.T) {
	t.Parallel()
	// The local index holds its first answer until the test has watched
	// the job through several rounds while the install has the network.
	hit, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	index := pipIndexHooked(t, func() {
		once.Do(func() { close(hit) })
		select {
		case <-release:
		case <-time.After(2 * time.Minute):
		}
	})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	s := startServer(t, installPolicy(t, "  pip_index_url: "+index+"\n"))
	name := "e2e-install-isolation"
	s.createWS(name, map[string]any{"language": "python"})

	// The watcher lists /sys/class/net every 100 ms, reports anything but
	// lo, and counts its rounds in a file. It sends no traffic.
	watcher := `i=0; while [ ! -e /workspace/.stop ]; do x=$(ls /sys/class/net | tr '\n' ' '); [ "$x" = "lo " ] || echo "SAW: $x"; i=$((i+1)); echo $i > /workspace/.rounds; sleep 0.1; done; echo "rounds $i"`
	id := str(s.wsRun(name, watcher, "background", true, "timeout_s", 600), "job_id")
	rounds := func() int {
		r := s.call("read_file", map[string]any{"workspace": name, "path": ".rounds"})
		if r.IsError {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(str(structured(t, r), "content")))
		return n
	}
	waitRounds := func(n int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for rounds() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the watcher job did not reach %d rounds (at %d)", n, rounds())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitRounds(1)

	done := make(chan map[string]any, 1)
	go func() {
		done <- structured(t, s.call("install_packages", map[string]any{"workspace": name, "packages": []any{"sbxdemo==1.2.3"}}))
	}()
	select {
	case <-hit:
	case r := <-done:
		t.Fatalf("the install ended before it reached the index: %v", r)
	case <-time.After(2 * time.Minute):
		t.Fatal("the install never reached the local index")
	}
	// The install is in the middle of its download: the network is its
	// container's, and the workspace's container has none.
	// Podman's API names its default bridge network "podman".
	if nets := installContainerNetworks(t, name); nets != "bridge" && nets != "podman" {
		t.Errorf("during the install the install container is on %q, want the default bridge", nets)
	}
	if nets := wsNetworks(t, name); nets != "" {
		t.Errorf("during the install the workspace's container is on %q", nets)
	}
	waitRounds(rounds() + 5)
	releaseOnce.Do(func() { close(release) })
	var r map[string]any
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("install_packages did not return")
	}
	if r["installed"] != true {
		t.Fatalf("install: %v", r)
	}
	if out := s.wsOut(name, `python3 -c "import sbxdemo; print(sbxdemo.answer())"`); out != "42\n" {
		t.Fatalf("import after the install: %q", out)
	}
	if nets := installContainerNetworks(t, name); nets != "" {
		t.Errorf("after the install an install container is still there, on %q", nets)
	}

	s.ok("write_file", map[string]any{"workspace": name, "path": ".stop", "content": ""})
	s.waitJob(id, "completed", time.Minute)
	out, _ := s.readAll(id)
	if strings.Contains(out, "SAW") || !strings.Contains(out, "rounds ") {
		t.Fatalf("the job running during the install saw a network: %q", out)
	}
	t.Logf("watcher: %s", strings.TrimSpace(out))
	s.ok("delete_workspace", map[string]any{"name": name})
}
