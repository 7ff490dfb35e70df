package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// contextTar is a build context holding only dockerfile.
func contextTar(t *testing.T, dockerfile string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(dockerfile))
	tw.Close()
	return buf.Bytes()
}

// runImages: a tag is absent until built; a build on image runs its steps, streams its output, carries
// its labels and is described; a failed RUN is a *sandbox.BuildError
// naming the step, its exit code and the last lines; a FROM image that is
// absent is refused (never pulled); an image a sandbox runs on is in use;
// a workspace's container commits with the config given, its own labels
// and variables left empty (an engine merges them into a commit); removal
// is idempotent.
func runImages(t *testing.T, e sandbox.Engine, image string) {
	b := e.Capabilities().Images
	ctx := context.Background()
	tag := ImagesBuilt + randomHex(6) + ":t1"
	t.Cleanup(func() { _ = b.RemoveImage(context.Background(), tag) })
	if _, err := b.ImageInfo(ctx, tag); !errors.Is(err, sandbox.ErrImageNotFound) {
		t.Fatalf("ImageInfo of a tag not built yet: %v, want ErrImageNotFound", err)
	}
	var lines []string
	err := b.BuildImage(ctx, sandbox.ImageBuild{Tag: tag, Network: "none", Labels: map[string]string{sandbox.LabelTemplate: "contract"},
		Context: contextTar(t, "FROM "+image+"\nRUN echo built-here > /tmp/marker && cat /tmp/marker\n")}, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatalf("BuildImage: %v", err)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "built-here") {
		t.Errorf("the build's output did not reach progress: %q", lines)
	}
	info, err := b.ImageInfo(ctx, tag)
	if err != nil || info.ID == "" || info.Size <= 0 || info.Labels[sandbox.LabelTemplate] != "contract" {
		t.Fatalf("ImageInfo: %+v %v", info, err)
	}
	t.Run("FailedStep", func(t *testing.T) {
		err := b.BuildImage(ctx, sandbox.ImageBuild{Tag: ImagesBuilt + randomHex(6) + ":bad", Network: "none",
			Context: contextTar(t, "FROM "+image+"\nRUN echo first-line; echo last-line; exit 7\n")}, nil)
		var be *sandbox.BuildError
		if !errors.As(err, &be) {
			t.Fatalf("a failing RUN: %v, want a *sandbox.BuildError", err)
		}
		if !strings.Contains(be.Step, "RUN echo first-line") || be.ExitCode != 7 || !strings.Contains(strings.Join(be.Tail, "\n"), "last-line") {
			t.Fatalf("BuildError: step %q, exit %d, tail %q", be.Step, be.ExitCode, be.Tail)
		}
	})
	t.Run("NeverPulls", func(t *testing.T) {
		err := b.BuildImage(ctx, sandbox.ImageBuild{Tag: ImagesBuilt + randomHex(6) + ":pull", Network: "none",
			Context: contextTar(t, "FROM "+UnpulledImage+"\nRUN true\n")}, nil)
		if err == nil || !strings.Contains(err.Error(), "never pulled") {
			t.Fatalf("a missing FROM image: %v", err)
		}
	})
	t.Run("InUse", func(t *testing.T) {
		h := start(t, e, Spec(tag, "sleep 30"), newBuffer())
		t.Cleanup(func() { _ = h.Destroy(context.Background()) })
		used, err := b.ImagesInUse(ctx)
		if err != nil || !used[info.ID] {
			t.Fatalf("ImagesInUse while a sandbox runs on it: %v (err %v)", used[info.ID], err)
		}
	})
	t.Run("CommitWorkspace", func(t *testing.T) {
		w := e.Capabilities().Workspaces
		if w == nil {
			t.Skip("the engine keeps no workspaces")
		}
		base := Spec(image, "")
		refs, err := w.CreateWorkspace(ctx, sandbox.WorkspaceSpec{Name: "contract-" + randomHex(4), Image: image, Limits: base.Limits,
			Env: []string{"WORKSPACE_ONLY=1"}})
		if err != nil {
			t.Fatalf("CreateWorkspace: %v", err)
		}
		t.Cleanup(func() { _ = w.RemoveWorkspace(context.Background(), refs) })
		if err := w.StartWorkspace(ctx, refs.ContainerID); err != nil {
			t.Fatal(err)
		}
		if code, err := w.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Cmd: []string{"sh", "-c", "echo root-change > /etc/contract-marker"}, User: "0:0"}); err != nil || code != 0 {
			t.Fatalf("exec: %d %v", code, err)
		}
		snap := ImagesBuilt + randomHex(6) + ":snap"
		t.Cleanup(func() { _ = b.RemoveImage(context.Background(), snap) })
		cfg := sandbox.ImageConfig{User: "1000:1000", Env: []string{"PATH=/usr/bin:/bin", "MINE=1"}, WorkingDir: "/workspace",
			Labels: map[string]string{sandbox.LabelTemplate: "snap"}}
		if err := b.CommitWorkspace(ctx, refs.ContainerID, snap, cfg); err != nil {
			t.Fatalf("CommitWorkspace: %v", err)
		}
		got, err := b.ImageInfo(ctx, snap)
		if err != nil {
			t.Fatal(err)
		}
		env := strings.Join(got.Config.Env, " ")
		if got.Config.User != "1000:1000" || strings.Contains(env, "WORKSPACE_ONLY=1") || !strings.Contains(env, "MINE=1") ||
			got.Labels[sandbox.LabelManaged] != "" || got.Labels[sandbox.LabelKind] != "" || got.Labels[sandbox.LabelTemplate] != "snap" {
			t.Fatalf("committed config %+v, labels %v: want only what was given", got.Config, got.Labels)
		}
		out := newBuffer()
		h := start(t, e, Spec(snap, "cat /etc/contract-marker"), out)
		if st := waitDone(t, h, "job on the commit"); st.ExitCode != 0 || out.Stdout() != "root-change\n" {
			t.Fatalf("a job on the commit: %s, %q %q", describe(st), out.Stdout(), out.Stderr())
		}
	})
	t.Run("Remove", func(t *testing.T) {
		gone := ImagesBuilt + randomHex(6) + ":gone"
		if err := b.RemoveImage(ctx, gone); err != nil {
			t.Fatalf("removing an absent image: %v", err)
		}
		if _, err := b.ImageInfo(ctx, gone); !errors.Is(err, sandbox.ErrImageNotFound) {
			t.Fatalf("ImageInfo of an absent image: %v", err)
		}
	})
}

// runSandboxImages: the builds of the missing sandbox images end without
// an error, and the image is then there. (On a real engine in
// the tests every image is present: the plan finds each up to date.)
func runSandboxImages(t *testing.T, e sandbox.Engine, image string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var log bytes.Buffer
	var mu sync.Mutex
	done, err := e.Capabilities().SandboxImages.BuildMissingImages(ctx, writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return log.Write(p)
	}))
	if err != nil {
		t.Fatalf("BuildMissingImages: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the builds: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the builds did not end")
	}
	if ok, err := e.ImageExists(ctx, image); !ok || err != nil {
		t.Fatalf("after the builds, %s: %v %v", image, ok, err)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
