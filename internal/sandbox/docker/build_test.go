package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

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

	log := &summaryLog{t: t}
	built, err := EnsureImages(ctx, cli, false, log)
	if err != nil {
		t.Fatalf("EnsureImages: %v\n--- build output (last 4 KiB) ---\n%s", err, lastBytes(log.all.Bytes(), 4096))
	}
	t.Logf("first call built %d image(s): %v", len(built), built)

	for _, im := range images.All() {
		for _, ref := range []string{images.Tag(im.Name), images.Repository(im.Name) + ":latest"} {
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
	if err == nil || !strings.Contains(err.Error(), "not present locally") {
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
		got, err := fromImages(c.df, c.args)
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
		df, err := dockerfileFromTar(tarball)
		if err != nil {
			t.Fatal(err)
		}
		args := map[string]string{images.BaseImageArg: images.Tag("base")}
		want := images.BaseRef
		if im.Base != "" {
			want = images.Tag(im.Base)
		}
		if got, err := fromImages(df, args); err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s: FROM images %v, %v; want [%s]", im.Name, got, err, want)
		}
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
