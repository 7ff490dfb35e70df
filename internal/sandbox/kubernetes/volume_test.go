package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestVolumes: a volume is a claim labelled for this instance whose exact
// labels (an image reference, a list with spaces) come back from
// ListVolumes; a filler pod with no network writes into it through the
// tunnel; a job pod and a warm pod mount it read-only (they read what was
// written and cannot write); removed, it is no longer listed and the claim
// goes once no pod mounts it.
func TestVolumes(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := context.Background()
	image := images.Tag("base")
	name := fmt.Sprintf("sandboxer-deps-test-%d", time.Now().UnixNano()%1e9)
	labels := map[string]string{"dev.sandboxer.deps": "k1", "dev.sandboxer.deps-image": image, "dev.sandboxer.deps-list": "a@1 b==2"}
	if err := rt.CreateVolume(ctx, name, labels); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.RemoveVolume(context.Background(), name) })
	for _, sel := range []string{"dev.sandboxer.deps", "dev.sandboxer.deps=k1", "dev.sandboxer.deps-image=" + image} {
		vols, err := rt.ListVolumes(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		if len(vols) != 1 || vols[0].Name != name || vols[0].Labels["dev.sandboxer.deps-list"] != "a@1 b==2" ||
			vols[0].Labels["dev.sandboxer.deps-image"] != image || vols[0].CreatedAt.IsZero() {
			t.Fatalf("ListVolumes(%q): %+v", sel, vols)
		}
	}
	if vols, err := rt.ListVolumes(ctx, "dev.sandboxer.deps=other"); err != nil || len(vols) != 0 {
		t.Fatalf("ListVolumes of another key: %+v, %v", vols, err)
	}

	// The filler: no network of its own; through the tunnel it fetches
	// from the proxy's handler and writes into the claim.
	fill := sandboxtest.Spec(image, "")
	fill.Kind, fill.WorkDir, fill.Limits.NanoCPUs = "deps-install", "/tmp", 25e7
	fill.Mounts = []sandbox.Mount{{Volume: name, Target: "/workspace"}}
	id, err := rt.StartFiller(ctx, fill)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), id) })
	proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fetched") })
	var out bytes.Buffer
	code, err := rt.Exec(ctx, id, sandbox.ExecOptions{Proxy: proxy, Stdout: &out, Cmd: []string{"bash", "-c",
		`exec 3<>/dev/tcp/127.0.0.1/${HTTP_PROXY##*:}; printf 'GET http://files.test/ HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n' >&3; ` +
			`cat <&3 | tail -c 7 > /workspace/got; awk '$2=="00000000"' /proc/net/route | wc -l`}})
	if err != nil || code != 0 || strings.TrimSpace(out.String()) != "0" {
		t.Fatalf("the filler through the tunnel: code %d, %v, %q (want no default route)", code, err, out.String())
	}
	if err := rt.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}

	ro := []sandbox.Mount{{Volume: name, Target: "/deps", ReadOnly: true}}
	const read = `cat /deps/got; echo; touch /deps/x 2>&1 | grep -c 'Read-only file system'`
	check := func(what string, h sandbox.Handle, buf *sandbox.Buffer) {
		t.Helper()
		waitEnd(t, h)
		if st := h.Status(); st.ExitCode != 0 || buf.Stdout() != "fetched\n1\n" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want the file and a read-only mount", what, st.ExitCode, buf.Stdout(), buf.Stderr())
		}
	}
	job := sandboxtest.Spec(image, read)
	job.Limits.NanoCPUs, job.Mounts = 25e7, ro
	buf := &sandbox.Buffer{Max: 1 << 16}
	h, err := rt.Start(ctx, job, buf)
	if err != nil {
		t.Fatal(err)
	}
	check("a job pod", h, buf)

	warmSpec := sandboxtest.Spec(image, "")
	warmSpec.Limits.NanoCPUs, warmSpec.Mounts = 25e7, ro
	w, err := rt.Prepare(ctx, warmSpec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Discard(context.Background()) })
	job = sandboxtest.Spec(image, read)
	job.Limits.NanoCPUs, job.Mounts = 25e7, ro
	buf = &sandbox.Buffer{Max: 1 << 16}
	if h, err = w.Launch(ctx, job, buf); err != nil {
		t.Fatal(err)
	}
	check("a warm pod", h, buf)

	// Host paths are copied in under /mnt only (mounts.go), never elsewhere.
	if _, err := rt.Start(ctx, sandbox.Spec{Image: image, Mounts: []sandbox.Mount{{Source: "/etc", Target: "/x"}}}, buf); err == nil ||
		!strings.Contains(err.Error(), `target "/x" is not /mnt/NAME`) {
		t.Errorf("a host path mount outside /mnt: %v", err)
	}

	if err := rt.RemoveVolume(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveVolume(ctx, name); err != nil {
		t.Fatalf("a second removal: %v", err)
	}
	if vols, err := rt.ListVolumes(ctx, "dev.sandboxer.deps"); err != nil || len(vols) != 0 {
		t.Fatalf("after removal: %+v, %v", vols, err)
	}
	_ = w.Discard(ctx)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := kubernetes.Core(rt).PersistentVolumeClaims(rt.Namespace()).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s still there 60 s after its removal (%v)", name, err)
		}
	}
}
