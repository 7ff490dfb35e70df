package docker_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// An install container is hardened and limited exactly like its
// workspace's container, shares its volume, is on the install network, and
// leaves the workspace's granted host mounts out; the workspace's own
// container has network mode none.
func TestInstallerIsTheWorkspacesTwinWithTheNetwork(t *testing.T) {
	rt, _ := newTestRuntime(t)
	ctx := context.Background()
	grant := t.TempDir()
	if err := os.WriteFile(grant+"/secret", []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "test-inst-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	refs, err := rt.CreateWorkspace(ctx, sandbox.WorkspaceSpec{
		Name: name, Image: images.Tag("base"), Env: []string{"SBX_TEST=1"},
		Limits: sandbox.Limits{MemoryBytes: 192 << 20, NanoCPUs: 5e8, Pids: 96, OpenFiles: 300, TmpBytes: 16 << 20},
		Mounts: []sandbox.Mount{{Source: grant, Target: "/mnt/project"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.RemoveWorkspace(context.Background(), refs) })
	if err := rt.StartWorkspace(ctx, refs.ContainerID); err != nil {
		t.Fatal(err)
	}
	inst, err := rt.StartInstaller(ctx, refs.ContainerID, "bridge")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Remove(ctx, inst)

	ws, err := rt.Client().ContainerInspect(ctx, refs.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := rt.Client().ContainerInspect(ctx, inst, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, i := ws.Container, in.Container
	if w.HostConfig.NetworkMode != "none" || i.HostConfig.NetworkMode != "bridge" {
		t.Errorf("network modes: workspace %q, installer %q", w.HostConfig.NetworkMode, i.HostConfig.NetworkMode)
	}
	if w.Image != i.Image || w.Config.User != i.Config.User || !reflect.DeepEqual(w.Config.Env, i.Config.Env) {
		t.Errorf("image, user or env differ: %s %s %q / %s %s %q", w.Image, w.Config.User, w.Config.Env, i.Image, i.Config.User, i.Config.Env)
	}
	wh, ih := w.HostConfig, i.HostConfig
	if !reflect.DeepEqual(wh.Resources, ih.Resources) || !reflect.DeepEqual(wh.CapDrop, ih.CapDrop) ||
		!reflect.DeepEqual(wh.SecurityOpt, ih.SecurityOpt) || !reflect.DeepEqual(wh.Tmpfs, ih.Tmpfs) ||
		wh.Runtime != ih.Runtime || wh.IpcMode != ih.IpcMode || wh.CgroupnsMode != ih.CgroupnsMode {
		t.Errorf("hardening differs:\nworkspace %+v\ninstaller %+v", wh, ih)
	}
	if len(ih.Mounts) != 1 || ih.Mounts[0].Source != refs.Volume || ih.Mounts[0].Target != "/workspace" {
		t.Errorf("installer mounts: %+v (want only the volume)", ih.Mounts)
	}
	// The volume is shared; the granted host directory is not there.
	var out strings.Builder
	code, err := rt.Exec(ctx, inst, sandbox.ExecOptions{Cmd: []string{"sh", "-c", "echo hi > /workspace/f; ls /mnt/project 2>&1 || echo no-grant"}, Stdout: &out, Stderr: &out})
	if err != nil || code != 0 || !strings.Contains(out.String(), "no-grant") {
		t.Fatalf("in the installer: %d %v %q", code, err, out.String())
	}
	out.Reset()
	if _, err := rt.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Cmd: []string{"sh", "-c", "cat /workspace/f; cat /mnt/project/secret"}, Stdout: &out}); err != nil || out.String() != "hi\nhost file" {
		t.Fatalf("in the workspace: %v %q", err, out.String())
	}
	if oom, err := rt.OOMKilled(ctx, inst); err != nil || oom {
		t.Errorf("OOMKilled of a quiet installer: %v %v", oom, err)
	}
}
