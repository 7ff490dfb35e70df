// Package sandboxtest is the contract every sandbox.Runtime keeps, as a test
// suite: the fake (internal/sandbox/fake), Docker and Podman, Kubernetes and
// containerd all run it (RunContract) and the suite of each part they
// declare (RunCapabilities), so tests written against the fake hold for the
// real thing. Its commands are valid bash and valid fake scripts alike.
package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// endWithin bounds every wait for a sandbox that should end.
const endWithin = 20 * time.Second

// NewRuntime makes a runtime for one test, with its own instance (so List
// sees only that test's sandboxes) and its cleanup registered on t.
type NewRuntime func(t *testing.T) sandbox.Runtime

// RunContract runs the contract's cases, in parallel, each on a runtime of its
// own; image is one with bash, cat and sleep.
func RunContract(t *testing.T, newRuntime NewRuntime, image string) {
	cases := []struct {
		name string
		run  func(t *testing.T, rt sandbox.Runtime, spec func(cmd string) sandbox.Spec)
	}{
		{"OutputAndExitCode", testOutputAndExitCode},
		{"ExitZero", testExitZero},
		{"OutputDrainedBeforeDone", testOutputDrained},
		{"BigOutputWhole", testBigOutput},
		{"JobFilesWritten", testJobFiles},
		{"FilesReturned", testFilesReturned},
		{"StdinWrittenThenClosed", testStdin},
		{"NoStdinIsEOF", testNoStdin},
		{"DestroyMidRun", testDestroy},
		{"SignalTerm", testSignalTerm},
		{"SignalAfterEnd", testSignalAfterEnd},
		{"RemoveUnknownID", testRemoveUnknown},
		{"ListWhileRunning", testList},
		{"RemovedFromOutside", testRemovedFromOutside},
		{"AdoptResumesOutput", testAdopt},
		{"AdoptUnknownID", testAdoptUnknown},
		{"PingAndImages", func(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
			testPingAndImages(t, rt, image)
		}},
		{"MissingImage", testMissingImage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := newRuntime(t)
			spec := func(cmd string) sandbox.Spec { return Spec(image, cmd) }
			tc.run(t, rt, spec)
		})
	}
}

// Spec is a small sandbox running `bash -c cmd` in image, with a unique job id.
func Spec(image, cmd string) sandbox.Spec {
	return sandbox.Spec{
		JobID: "contract-" + randomHex(6), Kind: "command",
		Image: image, Cmd: []string{"bash", "-c", cmd}, WorkDir: "/workspace",
		Limits: sandbox.Limits{MemoryBytes: 128 << 20, NanoCPUs: 5e8, Pids: 64, OpenFiles: 256,
			FileSizeBytes: 16 << 20, TmpBytes: 16 << 20, WorkdirBytes: 16 << 20, LogBytes: 1 << 20},
	}
}

func newBuffer() *sandbox.Buffer { return &sandbox.Buffer{Max: 1 << 20} }

func start(t *testing.T, rt sandbox.Runtime, spec sandbox.Spec, out sandbox.Output) sandbox.Handle {
	t.Helper()
	h, err := rt.Start(context.Background(), spec, out)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Cmd, err)
	}
	t.Cleanup(func() { _ = h.Destroy(context.Background()) })
	return h
}

// waitDone waits for Done and returns the status.
func waitDone(t *testing.T, h sandbox.Handle, what string) sandbox.ExitStatus {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(endWithin):
		t.Fatalf("%s: Done not closed within %s", what, endWithin)
	}
	return h.Status()
}

// waitFor polls until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(endWithin)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, endWithin)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describe(st sandbox.ExitStatus) string {
	return fmt.Sprintf("exit=%d oom=%v gone=%v err=%v cleanupErr=%v", st.ExitCode, st.OOMKilled, st.Gone, st.Err, st.CleanupErr)
}

// cleanEnd says whether a status claims a clean, known end.
func cleanEnd(st sandbox.ExitStatus) bool {
	return !st.Gone && st.Err == nil && !st.OOMKilled
}

func listed(t *testing.T, rt sandbox.Runtime, id string) (sandbox.Container, bool) {
	t.Helper()
	cs, err := rt.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, c := range cs {
		if c.ID == id {
			return c, true
		}
	}
	return sandbox.Container{}, false
}

// testOutputAndExitCode: both streams in order, a non-zero exit code, and the
// sandbox removed once Done (or shortly after).
func testOutputAndExitCode(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := newBuffer()
	h := start(t, rt, spec("echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3"), out)
	st := waitDone(t, h, "exit 3")
	if st.ExitCode != 3 || !cleanEnd(st) || st.CleanupErr != nil {
		t.Fatalf("status %s, want exit 3 and a clean end", describe(st))
	}
	if out.Stdout() != "out1\nout2\n" || out.Stderr() != "err1\nerr2\n" {
		t.Fatalf("stdout %q stderr %q", out.Stdout(), out.Stderr())
	}
	// Removed then or shortly after Done (a result need not wait for it).
	waitFor(t, "sandbox removed after Done", func() bool { _, ok := listed(t, rt, h.ContainerID()); return !ok })
}

// A spec's files are in place before its job starts (the egress proxy's
// CA for a job with secrets).
func testJobFiles(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := newBuffer()
	sp := spec("cat /tmp/.sandboxer/contract/ca.pem")
	sp.Files = []proto.File{{Path: "/tmp/.sandboxer/contract/ca.pem", Content: []byte("CERTIFICATE\n")}}
	h := start(t, rt, sp, out)
	st := waitDone(t, h, "cat a spec's file")
	if st.ExitCode != 0 || out.Stdout() != "CERTIFICATE\n" {
		t.Fatalf("status %s, stdout %q, stderr %q", describe(st), out.Stdout(), out.Stderr())
	}
}

// testFilesReturned: after the job, its figures (whole PNGs only) and the
// regular files its patterns match come back in ExitStatus.Files; a link is
// never followed, an unmatched file never sent.
func testFilesReturned(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	sp := spec(`mkdir -p out /tmp/figs; echo a > out/a.txt; echo bb > b.csv; echo no > c.log; ln -s /etc/passwd link.txt; ` +
		`printf PNG > /tmp/figs/figure-1.png; printf half > /tmp/figs/figure-2.png.part; echo done`)
	sp.Collect = &proto.Collect{Dir: "/workspace", Patterns: []string{"out/*.txt", "*.csv", "link.txt"}, FiguresDir: "/tmp/figs", MaxBytes: 1 << 20}
	out := newBuffer()
	h := start(t, rt, sp, out)
	st := waitDone(t, h, "files returned")
	if st.ExitCode != 0 || out.Stdout() != "done\n" {
		t.Fatalf("status %s, stdout %q, stderr %q", describe(st), out.Stdout(), out.Stderr())
	}
	var got []string
	for _, f := range st.Files {
		got = append(got, fmt.Sprintf("%s %s %d %q", f.Kind, f.Path, f.Size, f.Data))
	}
	want := []string{`figure figure-1.png 3 "PNG"`, `file b.csv 3 "bb\n"`, `file out/a.txt 2 "a\n"`}
	if !slices.Equal(got, want) {
		t.Fatalf("returned files:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func testExitZero(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := newBuffer()
	h := start(t, rt, spec("echo hello"), out)
	st := waitDone(t, h, "echo hello")
	if st.ExitCode != 0 || !cleanEnd(st) {
		t.Fatalf("status %s, want exit 0", describe(st))
	}
	if out.Stdout() != "hello\n" || out.Stderr() != "" {
		t.Fatalf("stdout %q stderr %q", out.Stdout(), out.Stderr())
	}
}

// testOutputDrained: everything printed just before the end is delivered before Done.
func testOutputDrained(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	var script, want strings.Builder
	for i := range 300 {
		fmt.Fprintf(&script, "echo line-%03d-abcdefghijklmnopqrstuvwxyz; ", i)
		fmt.Fprintf(&want, "line-%03d-abcdefghijklmnopqrstuvwxyz\n", i)
	}
	script.WriteString("echo last >&2; exit 0")
	out := newBuffer()
	h := start(t, rt, spec(script.String()), out)
	st := waitDone(t, h, "300 lines")
	if st.ExitCode != 0 || !cleanEnd(st) {
		t.Fatalf("status %s", describe(st))
	}
	if out.Stdout() != want.String() || out.Stderr() != "last\n" {
		t.Fatalf("output not drained before Done: got %d stdout bytes (want %d), stderr %q",
			len(out.Stdout()), want.Len(), out.Stderr())
	}
}

// testBigOutput: 15 MB of output reaches Output whole and in order, its
// tail as surely as its head. The job layer decides what it keeps of a big
// output (head and tail); a runtime drops nothing.
func testBigOutput(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := &tally{}
	h := start(t, rt, spec("seq 1 2000000"), out)
	select {
	case <-h.Done():
	case <-time.After(3 * endWithin):
		t.Fatalf("seq 1 2000000: Done not closed within %s (%d bytes so far)", 3*endWithin, out.total())
	}
	st := h.Status()
	const want = 14888896 // seq 1 2000000 | wc -c
	out.mu.Lock()
	defer out.mu.Unlock()
	if st.ExitCode != 0 || !cleanEnd(st) || out.n != want || out.stderr != 0 ||
		!strings.HasPrefix(string(out.head), "1\n2\n3\n") || !strings.HasSuffix(string(out.tail), "\n1999999\n2000000\n") {
		t.Fatalf("seq 1 2000000: %s, %d stdout bytes (want %d), %d stderr bytes, head %q, tail %q",
			describe(st), out.n, want, out.stderr, out.head, out.tail)
	}
}

// tally keeps a stream's size, its first and last bytes.
type tally struct {
	mu         sync.Mutex
	n, stderr  int
	head, tail []byte
}

func (o *tally) Write(s sandbox.Stream, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s != sandbox.Stdout {
		o.stderr += len(p)
		return
	}
	o.n += len(p)
	if len(o.head) < 64 {
		o.head = append(o.head, p[:min(len(p), 64-len(o.head))]...)
	}
	o.tail = append(o.tail, p...)
	if len(o.tail) > 64 {
		o.tail = append([]byte(nil), o.tail[len(o.tail)-64:]...)
	}
}

func (o *tally) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n + o.stderr
}

// testStdin: what is written reaches the process, CloseStdin is its end-of-file
// and is idempotent.
func testStdin(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	s := spec("cat")
	s.OpenStdin = true
	out := newBuffer()
	h := start(t, rt, s, out)
	ctx, cancel := context.WithTimeout(context.Background(), endWithin)
	defer cancel()
	for _, part := range []string{"hello\n", "world\n"} {
		n, err := h.WriteStdin(ctx, []byte(part))
		if err != nil || n != len(part) {
			t.Fatalf("WriteStdin(%q) = %d, %v", part, n, err)
		}
	}
	if err := h.CloseStdin(); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	if err := h.CloseStdin(); err != nil {
		t.Fatalf("second CloseStdin: %v", err)
	}
	st := waitDone(t, h, "cat after end-of-file")
	if st.ExitCode != 0 || !cleanEnd(st) {
		t.Fatalf("status %s", describe(st))
	}
	if out.Stdout() != "hello\nworld\n" {
		t.Fatalf("stdout %q, want what was written", out.Stdout())
	}
}

// testNoStdin: without OpenStdin the process reads end-of-file at once, and
// WriteStdin says there is no stdin.
func testNoStdin(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := newBuffer()
	h := start(t, rt, spec("cat; echo after-cat"), out)
	if _, err := h.WriteStdin(context.Background(), []byte("x")); !errors.Is(err, sandbox.ErrNoStdin) {
		t.Errorf("WriteStdin without OpenStdin: %v, want ErrNoStdin", err)
	}
	if err := h.CloseStdin(); err != nil {
		t.Errorf("CloseStdin without OpenStdin: %v", err)
	}
	st := waitDone(t, h, "cat without stdin")
	if st.ExitCode != 0 || !cleanEnd(st) || out.Stdout() != "after-cat\n" {
		t.Fatalf("status %s stdout %q", describe(st), out.Stdout())
	}
}

// testDestroy: Destroy ends a running sandbox, Done closes, the status is no
// clean exit and no outside removal, and a second Destroy is fine.
func testDestroy(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := newBuffer()
	h := start(t, rt, spec("echo started; sleep 60"), out)
	waitFor(t, "started printed", func() bool { return out.Stdout() == "started\n" })
	ctx := context.Background()
	if err := h.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	st := waitDone(t, h, "Destroy")
	if st.Gone || st.ExitCode == 0 {
		t.Fatalf("status after Destroy %s: want no clean exit and not Gone", describe(st))
	}
	if err := h.Destroy(ctx); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	if c, ok := listed(t, rt, h.ContainerID()); ok {
		t.Fatalf("sandbox still listed after Destroy: %+v", c)
	}
}

// testSignalTerm: TERM ends a process that does not handle it, with 128+15.
func testSignalTerm(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := newBuffer()
	h := start(t, rt, spec("echo started; sleep 60"), out)
	waitFor(t, "started printed", func() bool { return out.Stdout() == "started\n" })
	if err := h.Signal(context.Background(), "TERM"); err != nil {
		t.Fatalf("Signal TERM: %v", err)
	}
	st := waitDone(t, h, "TERM")
	if st.ExitCode != 143 || !cleanEnd(st) {
		t.Fatalf("status after TERM %s, want exit 143", describe(st))
	}
}

// testSignalAfterEnd: signalling a sandbox that has ended is not an error.
func testSignalAfterEnd(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	h := start(t, rt, spec("exit 0"), newBuffer())
	waitDone(t, h, "exit 0")
	for _, sig := range []string{"TERM", "KILL"} {
		if err := h.Signal(context.Background(), sig); err != nil {
			t.Errorf("Signal %s after the end: %v", sig, err)
		}
	}
}

func testRemoveUnknown(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	if err := rt.Remove(context.Background(), strings.Repeat("0f", 32)); err != nil {
		t.Fatalf("Remove of an unknown id: %v, want success", err)
	}
}

// testList: a running sandbox is listed with its labels; a destroyed one is not.
func testList(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	s := spec("sleep 60")
	h := start(t, rt, s, newBuffer())
	c, ok := listed(t, rt, h.ContainerID())
	if !ok {
		t.Fatalf("running sandbox %s not listed", h.ContainerID())
	}
	if c.JobID != s.JobID || c.Kind != s.Kind || !c.Running {
		t.Fatalf("listed as %+v, want job %s kind %s running", c, s.JobID, s.Kind)
	}
	if err := h.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, h, "Destroy")
	if _, ok := listed(t, rt, h.ContainerID()); ok {
		t.Fatal("destroyed sandbox still listed")
	}
}

// testRemovedFromOutside: a sandbox removed by id, not through its handle,
// ends as Gone (or with Err), never as a clean exit.
func testRemovedFromOutside(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	out := newBuffer()
	h := start(t, rt, spec("echo started; sleep 60"), out)
	waitFor(t, "started printed", func() bool { return out.Stdout() == "started\n" })
	errc := make(chan error, 1)
	go func() { errc <- rt.Remove(context.Background(), h.ContainerID()) }()
	if err := <-errc; err != nil {
		t.Fatalf("Remove: %v", err)
	}
	st := waitDone(t, h, "outside removal")
	if !st.Gone && st.Err == nil {
		t.Fatalf("status after outside removal %s: want Gone or Err", describe(st))
	}
}

// testAdopt: a second handle on a running sandbox gets the output not yet
// captured (skip counts per stream) and its end.
func testAdopt(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	first := newBuffer()
	h := start(t, rt, spec("echo line1; echo err1 >&2; sleep 2; echo line2; echo err2 >&2; exit 4"), first)
	waitFor(t, "first lines", func() bool { return first.Stdout() == "line1\n" && first.Stderr() == "err1\n" })
	second := newBuffer()
	h2, err := rt.Adopt(context.Background(), h.ContainerID(), int64(len("line1\n")), int64(len("err1\n")), second)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	t.Cleanup(func() { _ = h2.Destroy(context.Background()) })
	st2 := waitDone(t, h2, "adopted")
	st1 := waitDone(t, h, "original")
	if second.Stdout() != "line2\n" || second.Stderr() != "err2\n" {
		t.Fatalf("adopted handle got stdout %q stderr %q, want only what came after the skip", second.Stdout(), second.Stderr())
	}
	// Both handles race to inspect and remove: at least one sees the exit;
	// neither may claim a clean exit 0.
	if st1.ExitCode != 4 && st2.ExitCode != 4 {
		t.Fatalf("neither handle saw exit 4: original %s, adopted %s", describe(st1), describe(st2))
	}
	for _, st := range []sandbox.ExitStatus{st1, st2} {
		if st.ExitCode == 0 && cleanEnd(st) {
			t.Fatalf("a handle claims a clean exit 0: %s", describe(st))
		}
	}
}

func testAdoptUnknown(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	_, err := rt.Adopt(context.Background(), strings.Repeat("0e", 32), 0, 0, newBuffer())
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Adopt of an unknown id: %v, want ErrNotFound", err)
	}
}

func testPingAndImages(t *testing.T, rt sandbox.Runtime, image string) {
	ctx := context.Background()
	if err := rt.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if ok, err := rt.ImageExists(ctx, image); err != nil || !ok {
		t.Fatalf("ImageExists(%s) = %v, %v", image, ok, err)
	}
	if ok, err := rt.ImageExists(ctx, MissingImage); err != nil || ok {
		t.Fatalf("ImageExists(%s) = %v, %v, want false, nil", MissingImage, ok, err)
	}
}

// MissingImage is an image reference no engine has (a runtime under test
// that keeps images itself must treat it as missing).
const MissingImage = "sandboxer/contract-missing:none"

// ImagesBuilt is the namespace of the images the Images suite builds
// ("sandboxer/contract-…"): a runtime under test that keeps images itself
// must treat those as missing until built.
const ImagesBuilt = "sandboxer/contract-"

// UnpulledImage is an image of a registry that no engine has and none may
// pull (a runtime under test that keeps images itself must treat it as
// missing).
const UnpulledImage = "registry.invalid/nothing:here"

func testMissingImage(t *testing.T, rt sandbox.Runtime, spec func(string) sandbox.Spec) {
	s := spec("exit 0")
	s.Image = MissingImage
	h, err := rt.Start(context.Background(), s, newBuffer())
	if err == nil {
		_ = h.Destroy(context.Background())
		t.Fatal("Start with a missing image succeeded")
	}
	if !errors.Is(err, sandbox.ErrImageMissing) {
		t.Fatalf("Start with a missing image: %v, want ErrImageMissing", err)
	}
}
