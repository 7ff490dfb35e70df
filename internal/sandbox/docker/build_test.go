package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/images"
)

// buildTestClient connects to the engine named by the environment. An engine
// that does not answer skips the test, except under CI=true, where it fails it.
func buildTestClient(t *testing.T) *client.Client {
	t.Helper()
	unreachable := func(err error) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker engine not reachable (CI=true, so this fails instead of skipping): %v", err)
		}
		t.Skipf("docker engine not reachable: %v", err)
	}
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		unreachable(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		unreachable(err)
	}
	return cli
}

// summaryLog keeps the whole build output (shown when the test fails) and
// reports EnsureImages' own "==>" lines through t.Log as they come.
type summaryLog struct {
	t   *testing.T
	mu  sync.Mutex
	all bytes.Buffer
	cur []byte
}

func (l *summaryLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.cur = append(l.cur, p...)
	for {
		i := bytes.IndexByte(l.cur, '\n')
		if i < 0 {
			break
		}
		if line := string(l.cur[:i]); strings.HasPrefix(line, "==>") {
			l.t.Log(line)
		}
		l.cur = l.cur[i+1:]
	}
	return len(p), nil
}

// TestBuildEnsureImages really builds every sandbox image (several minutes the
// first time: apt downloads from the Debian mirror). Run it with a long
// -timeout, e.g. go test -timeout 30m -run TestBuild ./internal/sandbox/docker/
func TestBuildEnsureImages(t *testing.T) {
	cli := buildTestClient(t)
	ctx := t.Context()
	if dl, ok := t.Deadline(); ok && time.Until(dl) < 5*time.Minute {
		t.Logf("warning: test deadline in %s; building the images from scratch may take longer", time.Until(dl).Round(time.Second))
	}

	if images.Supervisor() == nil {
		if _, err := EnsureImages(ctx, cli, false, nil); err == nil || !strings.Contains(err.Error(), "build it with `make build`") {
			t.Errorf("EnsureImages without a supervisor: err = %v", err)
		}
		t.Skip("no supervisor embedded in this test binary (images/supervisor/sandboxer-supervisor): run `make build` first")
	}

	log := &summaryLog{t: t}
	built, err := EnsureImages(ctx, cli, false, log)
	if err != nil {
		t.Fatalf("EnsureImages: %v\n--- build output (last 4 KiB) ---\n%s", err, lastBytes(log.all.Bytes(), 4096))
	}
	t.Logf("first call built %d image(s): %v", len(built), built)

	for _, im := range images.All() {
		for _, ref := range []string{images.Tag(im.Name), images.Repository(im.Name) + ":latest", images.CoreTag(im.Name), images.CoreRepository(im.Name) + ":latest"} {
			ok, err := ImagePresent(ctx, cli, ref)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Errorf("%s missing after EnsureImages", ref)
			}
		}
		// The image runs as the unprivileged user in /workspace.
		inspect, err := cli.ImageInspect(ctx, images.Tag(im.Name))
		if err != nil {
			t.Fatal(err)
		}
		if cfg := inspect.Config; cfg == nil || cfg.User != "1000:1000" || cfg.WorkingDir != "/workspace" {
			t.Errorf("%s: config %+v, want User 1000:1000 and WorkingDir /workspace", im.Name, cfg)
		}
		// The final image is its core plus exactly one layer (the supervisor).
		core, err := cli.ImageInspect(ctx, images.CoreTag(im.Name))
		if err != nil {
			t.Fatal(err)
		}
		fl, cl := inspect.RootFS.Layers, core.RootFS.Layers
		if len(fl) != len(cl)+1 || !slices.Equal(fl[:len(cl)], cl) {
			t.Errorf("%s: final layers %v are not the core's %v plus one", im.Name, fl, cl)
		}
	}

	again, err := EnsureImages(ctx, cli, false, log)
	if err != nil {
		t.Fatalf("second EnsureImages: %v", err)
	}
	if len(again) != 0 {
		t.Errorf("second EnsureImages built %v, want nothing", again)
	}
}

func TestBuildImageFailureReportsTail(t *testing.T) {
	cli := buildTestClient(t)
	ctx := t.Context()
	if ok, err := ImagePresent(ctx, cli, images.BaseRef); err != nil || !ok {
		t.Skipf("%s not present (%v): run scripts/base-image.sh", images.BaseRef, err)
	}
	df := "FROM " + images.BaseRef + "\nRUN echo one-marker && echo two-marker >&2 && exit 3\n"
	tarball := tarOf(t, map[string]string{"Dockerfile": df})
	var out bytes.Buffer
	err := BuildImage(ctx, cli, "sandboxer/test-fail:x", tarball, nil, &out)
	var bf *BuildFailedError
	if !errors.As(err, &bf) {
		t.Fatalf("BuildImage error = %v, want a *BuildFailedError", err)
	}
	if !strings.Contains(err.Error(), "returned a non-zero code: 3") || !strings.Contains(err.Error(), "one-marker") {
		t.Errorf("error lacks the message or the output tail:\n%v", err)
	}
	if !strings.Contains(out.String(), "one-marker") {
		t.Errorf("build output not written to log:\n%s", out.String())
	}

	// A missing parent is refused before the engine is asked to pull it.
	tarball = tarOf(t, map[string]string{"Dockerfile": "FROM sandboxer/does-not-exist:nope\n"})
	err = BuildImage(ctx, cli, "sandboxer/test-fail:y", tarball, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "never pulled") {
		t.Errorf("missing parent: err = %v", err)
	}
}

func TestBuildDecodeStream(t *testing.T) {
	ok := `{"stream":"Step 1/2 : FROM x\n"}` + "\n" + `{"stream":" ---\u003e abc\n"}{"aux":{"ID":"sha256:1"}}` + "\n" + `{"stream":"Successfully built abc\n"}`
	var log bytes.Buffer
	if err := decodeBuildStream(strings.NewReader(ok), &log); err != nil {
		t.Fatal(err)
	}
	if want := "Step 1/2 : FROM x\n ---> abc\nSuccessfully built abc\n"; log.String() != want {
		t.Errorf("log = %q, want %q", log.String(), want)
	}

	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf(`{"stream":"line %d\n"}`, i))
	}
	lines = append(lines, `{"stream":"partial without newline"}`,
		`{"errorDetail":{"code":1,"message":"The command '/bin/sh -c false' returned a non-zero code: 1"},"error":"The command '/bin/sh -c false' returned a non-zero code: 1"}`)
	log.Reset()
	err := decodeBuildStream(strings.NewReader(strings.Join(lines, "\n")), &log)
	var bf *BuildFailedError
	if !errors.As(err, &bf) {
		t.Fatalf("err = %v, want *BuildFailedError", err)
	}
	if bf.Message != "The command '/bin/sh -c false' returned a non-zero code: 1" {
		t.Errorf("message %q", bf.Message)
	}
	if len(bf.Tail) != buildTailLines || bf.Tail[0] != "line 11" || bf.Tail[len(bf.Tail)-1] != "partial without newline" {
		t.Errorf("tail = %q", bf.Tail)
	}

	// Only the legacy "error" field.
	err = decodeBuildStream(strings.NewReader(`{"error":"boom"}`), &log)
	if !errors.As(err, &bf) || bf.Message != "boom" {
		t.Errorf("legacy error: %v", err)
	}
	// Garbage is an error, not success.
	if err := decodeBuildStream(strings.NewReader(`{"stream":"x"}{not json`), &log); err == nil {
		t.Error("malformed stream: no error")
	}
}

func TestBuildFromImages(t *testing.T) {
	cases := []struct {
		df   string
		args map[string]string
		want string
		err  bool
	}{
		{df: "FROM debian:bookworm-slim\nRUN x", want: "debian:bookworm-slim"},
		{df: "# c\nARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", args: map[string]string{"BASE_IMAGE": "sandboxer/base:abc"}, want: "sandboxer/base:abc"},
		{df: "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", err: true},
		{df: "ARG B=deb:1\nFROM $B AS one\nFROM one\nFROM scratch\nFROM --platform=linux/amd64 ${X:-alp:2} as two\nARG B=ignored\nFROM deb:1\n", want: "deb:1 alp:2"},
		{df: "FROM \\\n  img:tag\n", want: "img:tag"},
		{df: "RUN true\n", err: true},
	}
	for _, c := range cases {
		got, err := images.FromImages(c.df, c.args)
		if (err != nil) != c.err {
			t.Errorf("%q: err = %v", c.df, err)
			continue
		}
		if !c.err && strings.Join(got, " ") != c.want {
			t.Errorf("%q: got %q, want %q", c.df, got, c.want)
		}
	}
	for _, im := range images.All() {
		tarball, err := images.ContextTar(im.Name)
		if err != nil {
			t.Fatal(err)
		}
		df, err := images.DockerfileFromTar(tarball)
		if err != nil {
			t.Fatal(err)
		}
		args := map[string]string{}
		want := images.BaseRef
		if im.Base != "" {
			want = images.CoreTag(im.Base)
			args[images.BaseImageArg] = want // each image is built FROM its parent's core
		}
		if got, err := images.FromImages(df, args); err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s: FROM images %v, %v; want [%s]", im.Name, got, err, want)
		}
	}
	// Core builds get their parent's core tag; final builds are FROM their own core.
	builds, err := images.PlanWith([]byte("fake"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range builds {
		df, err := images.DockerfileFromTar(b.Context)
		if err != nil {
			t.Fatal(err)
		}
		got, err := images.FromImages(df, b.BuildArgs)
		want := images.BaseRef
		switch im, _ := images.Lookup(b.Image); {
		case b.Final:
			want = images.CoreTag(b.Image)
		case im.Base != "":
			want = images.CoreTag(im.Base)
		}
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s (final %v): FROM images %v, %v; want [%s]", b.Tag, b.Final, got, err, want)
		}
	}
}

// TestBuildSupervisorLayer builds the base image's final layer with a fake
// supervisor (a shell script) under a test repository, and checks the file is
// at images.SupervisorPath, root's, mode 0755, and runs as the sandbox user.
// Only the base core image is built if missing (about a minute, mostly cached).
func TestBuildSupervisorLayer(t *testing.T) {
	cli := buildTestClient(t) // testutil.RequireDocker's rule; testutil imports this package

	ctx := t.Context()
	if ok, err := ImagePresent(ctx, cli, images.BaseRef); err != nil || !ok {
		t.Skipf("%s not present (%v): run scripts/base-image.sh", images.BaseRef, err)
	}
	fake := []byte("#!/bin/sh\necho fake-supervisor-ran as $(id -u)\n")
	all, err := images.PlanWith(fake)
	if err != nil {
		t.Fatal(err)
	}
	var builds []images.Build
	for _, b := range all {
		if b.Image != "base" {
			continue
		}
		if b.Final {
			// Keep the real repositories (and their :latest) untouched.
			_, h, _ := strings.Cut(b.Tag, ":")
			b.Tag = "sandboxer/test-supervisor:" + h
		}
		builds = append(builds, b)
	}
	if len(builds) != 2 || builds[0].Final || !builds[1].Final {
		t.Fatalf("base builds: %+v", builds)
	}
	finalTag := builds[1].Tag
	t.Cleanup(func() {
		ctx := context.Background()
		for _, ref := range []string{finalTag, "sandboxer/test-supervisor:latest"} {
			_, _ = cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
		}
	})

	log := &summaryLog{t: t}
	if _, err := ensureBuilds(ctx, cli, builds, false, log, nil); err != nil {
		t.Fatalf("build: %v\n--- build output (last 4 KiB) ---\n%s", err, lastBytes(log.all.Bytes(), 4096))
	}
	again, err := ensureBuilds(ctx, cli, builds, false, log, nil)
	if err != nil || len(again) != 0 {
		t.Errorf("second build: built %v, err %v; want nothing", again, err)
	}

	inspect, err := cli.ImageInspect(ctx, finalTag)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := inspect.Config; cfg == nil || cfg.User != "1000:1000" || cfg.WorkingDir != "/workspace" {
		t.Errorf("final image config %+v, want User 1000:1000 and WorkingDir /workspace (the core's)", cfg)
	}

	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: finalTag, Cmd: []string{images.SupervisorPath}},
		Name:   fmt.Sprintf("sandboxer-test-supervisor-%d", time.Now().UnixNano()),
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ID
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
	})

	cp, err := cli.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: images.SupervisorPath})
	if err != nil {
		t.Fatalf("%s not in the final image: %v", images.SupervisorPath, err)
	}
	tr := tar.NewReader(cp.Content)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(tr)
	_ = cp.Content.Close()
	if hdr.Typeflag != tar.TypeReg || hdr.Mode&0o7777 != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 || !bytes.Equal(data, fake) {
		t.Errorf("%s: type %c mode %o uid %d gid %d content %q; want a regular file, 755, 0:0, the fake supervisor",
			images.SupervisorPath, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, data)
	}

	// It runs, as the image's unprivileged user.
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	wait := cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case res := <-wait.Result:
		if res.StatusCode != 0 {
			t.Errorf("supervisor exited %d", res.StatusCode)
		}
	case err := <-wait.Error:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("supervisor did not exit within 30s")
	}
	logs, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(logs)
	_ = logs.Close()
	if !strings.Contains(string(out), "fake-supervisor-ran as 1000") {
		t.Errorf("supervisor output %q", out)
	}
}

func TestBuildRepositoryOf(t *testing.T) {
	for ref, want := range map[string]string{
		"sandboxer/base:abc":        "sandboxer/base",
		"localhost:5000/x/y:tag":    "localhost:5000/x/y",
		"sandboxer/base":            "",
		"localhost:5000/x":          "",
		"sandboxer/base:":           "",
		"x@sha256:0123456789abcdef": "",
	} {
		got, ok := repositoryOf(ref)
		if got != want || ok != (want != "") {
			t.Errorf("repositoryOf(%q) = %q, %v; want %q", ref, got, ok, want)
		}
	}
}

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestEnsureRebuildsAChildOfAReplacedParent: two builds at once can each
// make a parent image; the tag ends on the second while a child was made on
// the first. The next ensure makes the child again, on the tagged parent.
func TestEnsureRebuildsAChildOfAReplacedParent(t *testing.T) {
	cli := buildTestClient(t)
	ctx := t.Context()
	parent, child := "sandboxer/test-parent:1", "sandboxer/test-child:1"
	t.Cleanup(func() {
		for _, ref := range []string{child, "sandboxer/test-child:latest", parent, "sandboxer/test-parent:latest"} {
			_, _ = cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{PruneChildren: true})
		}
	})
	parentCtx := func(n string) []byte {
		return tarOf(t, map[string]string{"Dockerfile": "FROM " + images.BaseRef + "\nRUN echo " + n + " > /parent\n"})
	}
	builds := []images.Build{
		{Image: "test-parent", Tag: parent, Context: parentCtx("one")},
		{Image: "test-child", Tag: child, Context: tarOf(t, map[string]string{"Dockerfile": "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo child > /child\n"}),
			BuildArgs: map[string]string{images.BaseImageArg: parent}},
	}
	log := &summaryLog{t: t}
	if _, err := ensureBuilds(ctx, cli, builds, false, log, nil); err != nil {
		t.Fatalf("build: %v\n%s", err, lastBytes(log.all.Bytes(), 4096))
	}
	// Another build takes the parent's tag with other layers.
	if err := buildImage(ctx, cli, parent, parentCtx("two"), nil, false, log); err != nil {
		t.Fatal(err)
	}
	if ok, err := builtOn(ctx, cli, child, parent); err != nil || ok {
		t.Fatalf("builtOn after the parent was replaced = %v, %v; want false", ok, err)
	}
	built, err := ensureBuilds(ctx, cli, builds, false, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(built, []string{child}) {
		t.Fatalf("ensure after the parent was replaced built %v, want the child only", built)
	}
	if ok, err := builtOn(ctx, cli, child, parent); err != nil || !ok {
		t.Fatalf("builtOn after the ensure = %v, %v; want true", ok, err)
	}
}

// TestBuildLogPrefixesWholeLines: builds that run at once share the log a
// whole line at a time, each line naming its build.
func TestBuildLogPrefixesWholeLines(t *testing.T) {
	var mu sync.Mutex
	var shared bytes.Buffer
	a := &buildLog{mu: &mu, w: &shared, prefix: "[a] "}
	b := &buildLog{mu: &mu, w: &shared, prefix: "[b] "}
	a.Write([]byte("Step 1/2 : FR"))
	b.Write([]byte("one\ntw"))
	a.Write([]byte("OM x\nStep 2/2"))
	b.Write([]byte("o\n"))
	a.flush()
	want := "[b] one\n[a] Step 1/2 : FROM x\n[b] two\n[a] Step 2/2\n"
	if shared.String() != want {
		t.Fatalf("shared log %q, want %q", shared.String(), want)
	}
}

// A free build place goes to the ready build earliest in the plan: a final
// image before any core after it, python's core before go's before
// javascript's; after a failure no more builds start.
func TestRunInPlanOrder(t *testing.T) {
	builds, err := images.PlanWith([]byte("supervisor"))
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]int{} // "python" core, "python!" final -> index
	for i, b := range builds {
		key := b.Image
		if b.Final {
			key += "!"
		}
		at[key] = i
	}
	starts := make(chan int, len(builds))
	release := make([]chan error, len(builds))
	for i := range release {
		release[i] = make(chan error, 1)
	}
	result := make(chan error, 1)
	go func() {
		result <- runInPlanOrder(t.Context(), builds, 3, func(ctx context.Context, i int) error {
			starts <- i
			return <-release[i]
		})
	}()
	expect := func(keys ...string) {
		t.Helper()
		var want, got []int
		for _, k := range keys {
			want = append(want, at[k])
			got = append(got, <-starts)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("started %v, want %v (%v)", got, want, keys)
		}
	}
	expect("base")
	release[at["base"]] <- nil
	expect("base!", "python", "go")
	release[at["base!"]] <- nil
	expect("javascript")
	release[at["python"]] <- nil
	expect("python!") // before rust's core, which was ready first
	release[at["python!"]] <- nil
	expect("rust")
	// The rest, in whatever order they come: each build starts once.
	seen := map[int]bool{}
	for _, k := range []string{"base", "base!", "python", "python!", "go", "javascript", "rust"} {
		seen[at[k]] = true
	}
	for _, k := range []string{"go", "javascript", "rust"} {
		release[at[k]] <- nil
	}
	for done := false; !done; {
		select {
		case err := <-result:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case i := <-starts:
			if seen[i] {
				t.Fatalf("build %d started twice", i)
			}
			seen[i] = true
			release[i] <- nil
		}
	}
	if len(seen) != len(builds) {
		t.Errorf("started %d builds of %d", len(seen), len(builds))
	}

	// One at a time, a failure starts nothing more.
	failed := 0
	err = runInPlanOrder(t.Context(), builds, 1, func(ctx context.Context, i int) error {
		failed++
		return errors.New("base failed")
	})
	if err == nil || err.Error() != "base failed" || failed != 1 {
		t.Errorf("after a failure: %v, %d builds run; want the failure, 1", err, failed)
	}
}
