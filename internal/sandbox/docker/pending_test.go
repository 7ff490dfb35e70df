package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// TestBuildMissingImagesSaysBuilding builds a small image in the background
// as serve --build-images does. Until its build ends (held here), the image
// is reported as being built by ImageExists and by a sandbox started on it;
// then it is there. A build that fails leaves the image plainly missing.
func TestBuildMissingImagesSaysBuilding(t *testing.T) {
	cli := buildTestClient(t)
	ctx := t.Context()
	if ok, err := ImagePresent(ctx, cli, images.BaseRef); err != nil || !ok {
		t.Skipf("%s not present (%v): run scripts/base-image.sh", images.BaseRef, err)
	}
	r, err := New("test-pending")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	suffix := fmt.Sprint(time.Now().UnixNano())
	good := "sandboxer/test-pending:" + suffix
	bad := "sandboxer/test-pending-fails:" + suffix
	t.Cleanup(func() {
		// A build also tags <repository>:latest.
		for _, ref := range []string{good, bad, "sandboxer/test-pending:latest", "sandboxer/test-pending-fails:latest"} {
			_, _ = cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{PruneChildren: true})
		}
	})
	build := func(tag, run string) images.Build {
		df := fmt.Sprintf("FROM %s\nRUN %s\nUSER 1000:1000\n", images.BaseRef, run)
		return images.Build{Image: "test-pending", Tag: tag, Final: true, Context: tarOf(t, map[string]string{"Dockerfile": df})}
	}

	hold := make(chan struct{})
	beforeImageReady = func(string) { <-hold }
	t.Cleanup(func() { beforeImageReady = func(string) {} })
	log := &summaryLog{t: t}
	done, err := r.buildMissing(ctx, []images.Build{build(good, "echo built > /built")}, log)
	if err != nil {
		t.Fatal(err)
	}
	building := func(what string, err error) {
		t.Helper()
		var ie *sandbox.ImageError
		if !errors.As(err, &ie) || !ie.Building || ie.Image != good || !strings.Contains(err.Error(), "is being built") {
			t.Errorf("%s while the image is built: %v, want an ImageError that says it is being built", what, err)
		}
	}
	ok, err := r.ImageExists(ctx, good)
	if ok {
		t.Error("ImageExists = true while the image is built")
	}
	building("ImageExists", err)
	spec := sandbox.Spec{Kind: sandbox.KindPool, Image: good, Cmd: []string{"true"}, WorkDir: "/workspace",
		Limits: sandbox.Limits{MemoryBytes: 128 << 20, NanoCPUs: 5e8, Pids: 64, OpenFiles: 256,
			FileSizeBytes: 16 << 20, TmpBytes: 16 << 20, WorkdirBytes: 16 << 20, LogBytes: 1 << 20}}
	w, err := r.Prepare(ctx, spec)
	if err == nil {
		w.Discard(ctx)
	}
	building("Prepare", err)
	close(hold)
	if err := <-done; err != nil {
		t.Fatalf("the background build: %v\n%s", err, lastBytes(log.all.Bytes(), 4096))
	}
	if ok, err := r.ImageExists(ctx, good); !ok || err != nil {
		t.Errorf("ImageExists after the build = %v, %v; want true", ok, err)
	}
	again, err := r.buildMissing(ctx, []images.Build{build(good, "echo built > /built")}, log)
	if err != nil || <-again != nil {
		t.Errorf("a second buildMissing with nothing missing: %v", err)
	}

	beforeImageReady = func(string) {}
	failed, err := r.buildMissing(ctx, []images.Build{build(bad, "exit 3")}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-failed; err == nil {
		t.Error("a failing build reported success")
	}
	if ok, err := r.ImageExists(ctx, bad); ok || err != nil {
		t.Errorf("ImageExists after a failed build = %v, %v; want false, nil (missing, no longer being built)", ok, err)
	}
}
