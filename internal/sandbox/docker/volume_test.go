package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// A volume is filled by one sandbox (read-write, taking the owner of the
// image's directory it is mounted on) and read by another (read-only).
func TestVolumesAndMounts(t *testing.T) {
	rt, _ := newTestRuntime(t)
	ctx := context.Background()
	name := "sandboxer-test-vol-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	if err := rt.CreateVolume(ctx, name, map[string]string{"dev.sandboxer.test": "1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.RemoveVolume(context.Background(), name) })
	vols, err := rt.ListVolumes(ctx, "dev.sandboxer.test")
	if err != nil || len(vols) != 1 || vols[0].Name != name {
		t.Fatalf("ListVolumes: %v %v", vols, err)
	}

	run := func(spec sandbox.Spec) (string, int) {
		t.Helper()
		out := newBuffer()
		h, err := rt.Start(ctx, spec, out)
		if err != nil {
			t.Fatal(err)
		}
		<-h.Done()
		return out.Stdout() + out.Stderr(), h.Status().ExitCode
	}
	fill := testSpec("echo hello > /workspace/f && stat -c %u /workspace")
	fill.WorkDir = "/tmp"
	fill.Mounts = []sandbox.Mount{{Volume: name, Target: "/workspace"}}
	if out, code := run(fill); code != 0 || strings.TrimSpace(out) != "1000" {
		t.Fatalf("fill: exit %d, %q (want the sandbox user's volume)", code, out)
	}
	read := testSpec("cat /deps/f; touch /deps/g && echo writable")
	read.Mounts = []sandbox.Mount{{Volume: name, Target: "/deps", ReadOnly: true}}
	out, _ := run(read)
	if !strings.HasPrefix(out, "hello\n") || strings.Contains(out, "writable") || !strings.Contains(out, "Read-only") {
		t.Fatalf("read-only mount: %q", out)
	}
	sizes, err := rt.VolumeSizes(ctx)
	if err != nil || sizes[name] <= 0 {
		t.Errorf("VolumeSizes: %v %v", sizes[name], err)
	}
	if err := rt.RemoveVolume(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveVolume(ctx, name); err != nil {
		t.Errorf("removing a removed volume: %v", err)
	}
}
