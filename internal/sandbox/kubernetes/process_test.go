package kubernetes_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestProcesses: a job's processes are listed through pods/exec with the
// pod's own pids (the supervisor is pid 1), and one of them is killed.
func TestProcesses(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := context.Background()
	h, err := rt.Start(ctx, sandboxtest.Spec(images.Tag("base"), "sleep 301 & sleep 302 & wait"), &sandbox.Buffer{Max: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy(ctx)
	pidOf := func(ps []sandbox.Process, cmd string) int {
		for _, p := range ps {
			if p.Command == cmd {
				return p.PID
			}
		}
		return 0
	}
	var ps []sandbox.Process
	for i := 0; i < 100 && pidOf(ps, "sleep 301") == 0; i++ {
		if ps, err = rt.Processes(ctx, h.ContainerID()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	target := pidOf(ps, "sleep 301")
	if target == 0 || pidOf(ps, "sleep 302") == 0 {
		t.Fatalf("no sleeps listed: %+v", ps)
	}
	for _, p := range ps {
		if p.PID == 1 && !strings.HasPrefix(p.Command, "/usr/local/bin/sandboxer-supervisor") {
			t.Errorf("pid 1 is %q, want the supervisor", p.Command)
		}
		if p.User == "root" || strings.HasPrefix(p.Command, "ps ") {
			t.Errorf("listed %+v", p)
		}
	}
	if err := rt.KillProcess(ctx, h.ContainerID(), target, "KILL"); err != nil {
		t.Fatal(err)
	}
	gone := false
	for i := 0; i < 100 && !gone; i++ {
		if ps, err = rt.Processes(ctx, h.ContainerID()); err != nil {
			t.Fatal(err)
		}
		gone = pidOf(ps, "sleep 301") == 0
		time.Sleep(100 * time.Millisecond)
	}
	if !gone || pidOf(ps, "sleep 302") == 0 {
		t.Fatalf("after kill_process: %+v", ps)
	}
	if err := rt.KillProcess(ctx, h.ContainerID(), 99999, "TERM"); !errors.Is(err, sandbox.ErrNoSuchProcess) {
		t.Fatalf("kill of pid 99999: %v", err)
	}
	if err := rt.KillProcess(ctx, h.ContainerID(), target, "SEGV"); err == nil {
		t.Fatal("signal SEGV accepted")
	}
	if err := h.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, h)
	if _, err := rt.Processes(ctx, h.ContainerID()); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("processes of a deleted pod: %v", err)
	}
}

// TestErrorHook: a failed API call is counted by operation.
func TestErrorHook(t *testing.T) {
	newTestRuntime(t) // skips outside make test-k8s
	var mu sync.Mutex
	var ops []string
	rt, err := kubernetes.New("test-hook", kubernetes.Config{Namespace: "sandboxer-no-such-namespace"},
		kubernetes.WithErrorHook(func(op string) { mu.Lock(); ops = append(ops, op); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if _, err := rt.List(context.Background()); err == nil {
		t.Fatal("listing pods of a namespace the account may not read succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) != 1 || ops[0] != "list pods" {
		t.Fatalf("error hook saw %q, want [list pods] (KUBECONFIG=%s)", ops, os.Getenv("KUBECONFIG"))
	}
}
