package kubernetes_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestWorkspace: a workspace is a claim plus a pod running the supervisor's
// daemon. Commands, jobs (over one stream to the daemon) and tar copies
// reach its /workspace; a stop deletes the pod and keeps the files; a job
// outlives its server's runtime and is re-attached by the next; a removal
// leaves neither pod nor claim.
func TestWorkspace(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := context.Background()
	refs, err := rt.CreateWorkspace(ctx, sandbox.WorkspaceSpec{Name: "k8s-test", Image: images.Tag("base"), Env: []string{"WS_VAR=from-spec"},
		Limits: sandbox.Limits{MemoryBytes: 256 << 20, NanoCPUs: 25e7, Pids: 128, TmpBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.RemoveWorkspace(context.Background(), refs) })
	if err := rt.StartWorkspace(ctx, refs.ContainerID); err != nil {
		t.Fatal(err)
	}
	run := func(cmd string, env ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := rt.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Cmd: []string{"sh", "-c", cmd}, Env: env, Stdout: &out, Stderr: &errb})
		if err != nil || code != 0 {
			t.Fatalf("exec %q: exit %d, %v: %s", cmd, code, err, errb.String())
		}
		return out.String()
	}
	if got := run(`echo kept > /workspace/f && pwd && id -u && echo "$WS_VAR $EXTRA"`, "EXTRA=extra"); got != "/workspace\n1000\nfrom-spec extra\n" {
		t.Fatalf("exec: %q", got)
	}

	// A job on the daemon's stream, with stdin.
	spec := sandboxtest.Spec(images.Tag("base"), `read line; echo "$line $(cat /workspace/f) $WS_VAR"; echo oops >&2; exit 3`)
	spec.OpenStdin = true
	out := &sandbox.Buffer{Max: 1 << 16}
	h, err := rt.StartIn(ctx, refs.ContainerID, spec, out)
	if err != nil {
		t.Fatal(err)
	}
	if cid, ok := sandbox.WorkspaceJob(h.ContainerID()); !ok || cid != refs.ContainerID {
		t.Fatalf("ContainerID %q does not name pod %s and a job", h.ContainerID(), refs.ContainerID)
	}
	if _, err := h.WriteStdin(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, h)
	if st := h.Status(); st.ExitCode != 3 || out.Stdout() != "hello kept from-spec\n" || out.Stderr() != "oops\n" {
		t.Fatalf("job: %+v stdout %q stderr %q", st, out.Stdout(), out.Stderr())
	}

	// pods/exec runs the stream's connect as uid 1000, like the jobs: one
	// can kill it. The runtime then makes a new stream and re-attaches the
	// jobs past what they printed: nothing is lost.
	long := sandboxtest.Spec(images.Tag("base"), `for i in 1 2 3 4 5 6; do echo n$i; sleep 0.3; done`)
	outLong := &sandbox.Buffer{Max: 1 << 16}
	hl, err := rt.StartIn(ctx, refs.ContainerID, long, outLong)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && outLong.Stdout() == ""; i++ {
		run("sleep 0.05")
	}
	run(`pkill -KILL -f 'sandboxer-supervisor [c]onnect'`)
	waitEnd(t, hl)
	if st := hl.Status(); st.ExitCode != 0 || outLong.Stdout() != "n1\nn2\nn3\nn4\nn5\nn6\n" {
		t.Fatalf("a job whose stream was killed: %+v stdout %q", st, outLong.Stdout())
	}

	// Tar copies both ways.
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	_ = tw.WriteHeader(&tar.Header{Name: "g", Mode: 0o644, Size: 6, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("copied"))
	_ = tw.Close()
	if err := rt.CopyTo(ctx, refs.ContainerID, "/workspace", &archive); err != nil {
		t.Fatal(err)
	}
	rc, err := rt.CopyFrom(ctx, refs.ContainerID, "/workspace/.")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hd, err := tr.Next()
		if err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
		b, _ := io.ReadAll(tr)
		names[strings.TrimPrefix(hd.Name, "./")] = string(b)
	}
	rc.Close()
	if names["f"] != "kept\n" || names["g"] != "copied" {
		t.Fatalf("CopyFrom: %q", names)
	}

	// A job outlives this runtime: another (the next server) re-attaches it.
	late := sandboxtest.Spec(images.Tag("base"), `echo early; read x < /workspace/go-fifo; echo late; exit 4`)
	run(`mkfifo /workspace/go-fifo`)
	out1 := &sandbox.Buffer{Max: 1 << 16}
	h1, err := rt.StartIn(ctx, refs.ContainerID, late, out1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && out1.Stdout() == ""; i++ {
		run("sleep 0.05")
	}
	rt2, err := kubernetes.New("test-"+t.Name(), kubernetes.Config{Namespace: os.Getenv("SANDBOXER_K8S_NAMESPACE")})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	rt.Close() // its stream to the daemon ends; the job runs on
	out2 := &sandbox.Buffer{Max: 1 << 16}
	h2, err := rt2.Adopt(ctx, h1.ContainerID(), int64(len(out1.Stdout())), 0, out2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt2.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Cmd: []string{"sh", "-c", "echo go > /workspace/go-fifo"}}); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, h2)
	if st := h2.Status(); st.ExitCode != 4 || out1.Stdout()+out2.Stdout() != "early\nlate\n" {
		t.Fatalf("re-attached job: %+v stdout %q then %q", st, out1.Stdout(), out2.Stdout())
	}

	// Stop: the pod goes, the files stay; start makes the pod again.
	if err := rt2.StopWorkspace(ctx, refs.ContainerID); err != nil {
		t.Fatal(err)
	}
	if running, err := rt2.WorkspaceRunning(ctx, refs.ContainerID); err != nil || running {
		t.Fatalf("stopped workspace: running %v, %v", running, err)
	}
	if err := rt2.StartWorkspace(ctx, refs.ContainerID); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := rt2.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Cmd: []string{"cat", "/workspace/f", "/workspace/g"}, Stdout: &got}); err != nil || got.String() != "kept\ncopied" {
		t.Fatalf("after a stop and a start: %q, %v", got.String(), err)
	}

	if err := rt2.RemoveWorkspace(ctx, refs); err != nil {
		t.Fatal(err)
	}
	if _, err := rt2.WorkspaceRunning(ctx, refs.ContainerID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("removed workspace: %v", err)
	}
}
