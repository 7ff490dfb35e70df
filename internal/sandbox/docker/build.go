package docker

// Image builds through the Engine API (classic builder): the sandbox images'
// embedded build contexts (package images) are sent as tar streams; nothing is
// ever pulled.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/images"
)

// buildTailLines is how many lines of build output a failed build's error carries.
const buildTailLines = 20

// ImagePresent reports whether the engine has the image ref locally.
func ImagePresent(ctx context.Context, cli *client.Client, ref string) (bool, error) {
	_, err := cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("inspect image %s: %w", ref, err)
}

// BuildImage builds contextTar (a tar with a Dockerfile at its root) with the
// engine's classic builder and tags the result tag and <repository>:latest.
// Build output goes to log (may be nil). Every FROM image must already be present
// locally: BuildImage checks that first and never pulls. A failed build returns
// an error carrying the build's message and the last lines of its output.
func BuildImage(ctx context.Context, cli *client.Client, tag string, contextTar []byte, buildArgs map[string]string, log io.Writer) error {
	return buildImage(ctx, cli, tag, contextTar, buildArgs, false, log)
}

func buildImage(ctx context.Context, cli *client.Client, tag string, contextTar []byte, buildArgs map[string]string, noCache bool, log io.Writer) error {
	if log == nil {
		log = io.Discard
	}
	repo, ok := repositoryOf(tag)
	if !ok {
		return fmt.Errorf("build: %q is not a repository:tag reference", tag)
	}

	// The classic builder pulls a missing FROM image even with pull=0; refuse
	// instead, with a message that says what is missing.
	if _, err := images.CheckParents(contextTar, buildArgs, func(ref string) (bool, error) { return ImagePresent(ctx, cli, ref) }); err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}

	args := make(map[string]*string, len(buildArgs))
	for k, v := range buildArgs {
		args[k] = &v
	}
	tags := []string{tag}
	if latest := repo + ":latest"; latest != tag {
		tags = append(tags, latest)
	}
	res, err := cli.ImageBuild(ctx, bytes.NewReader(contextTar), client.ImageBuildOptions{
		Tags:        tags,
		Dockerfile:  "Dockerfile",
		BuildArgs:   args,
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		NoCache:     noCache,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	defer res.Body.Close()

	if err := decodeBuildStream(res.Body, log); err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	// The stream can end early without an error message (engine restarted,
	// connection cut): only the image itself proves the build succeeded.
	present, err := ImagePresent(ctx, cli, tag)
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	if !present {
		return fmt.Errorf("build %s: the build reported no error but the image does not exist", tag)
	}
	return nil
}

// buildMessage is one JSON message of the /build response stream. Older engines
// send the error both as "error" and as "errorDetail".
type buildMessage struct {
	Stream      string            `json:"stream"`
	Status      string            `json:"status"`
	ID          string            `json:"id"`
	Error       string            `json:"error"`
	ErrorDetail *jsonstream.Error `json:"errorDetail"`
}

// BuildFailedError is a build the engine reported as failed.
type BuildFailedError struct {
	Message string   // the engine's error message
	Tail    []string // the last lines of the build's output
}

func (e *BuildFailedError) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if len(e.Tail) > 0 {
		b.WriteString("\n--- last build output ---\n")
		b.WriteString(strings.Join(e.Tail, "\n"))
	}
	return b.String()
}

// decodeBuildStream copies the build output of a /build response stream to log
// and returns a *BuildFailedError if the engine reported a failure.
func decodeBuildStream(r io.Reader, log io.Writer) error {
	tail := newLineTail(buildTailLines)
	out := io.MultiWriter(log, tail)
	dec := json.NewDecoder(r)
	for {
		var msg buildMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			tail.flush()
			return fmt.Errorf("reading build output: %w", err)
		}
		switch {
		case msg.Stream != "":
			_, _ = io.WriteString(out, msg.Stream)
		case msg.Status != "":
			line := msg.Status
			if msg.ID != "" {
				line = msg.ID + ": " + line
			}
			_, _ = io.WriteString(out, line+"\n")
		}
		if msg.Error != "" || msg.ErrorDetail != nil {
			text := msg.Error
			if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
				text = msg.ErrorDetail.Message
			}
			if text == "" {
				text = "build failed"
			}
			_, _ = io.WriteString(log, "ERROR: "+text+"\n")
			tail.flush()
			return &BuildFailedError{Message: text, Tail: tail.lines()}
		}
	}
}

// lineTail keeps the last n lines written to it.
type lineTail struct {
	n       int
	buf     []string
	partial []byte
}

func newLineTail(n int) *lineTail { return &lineTail{n: n} }

func (t *lineTail) Write(p []byte) (int, error) {
	data := append(t.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		t.add(string(data[:i]))
		data = data[i+1:]
	}
	t.partial = append([]byte(nil), data...)
	return len(p), nil
}

func (t *lineTail) add(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	t.buf = append(t.buf, line)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
}

func (t *lineTail) flush() {
	if len(t.partial) > 0 {
		t.add(string(t.partial))
		t.partial = nil
	}
}

func (t *lineTail) lines() []string { return append([]string(nil), t.buf...) }

// repositoryOf splits repo:tag (the tag is after the last colon that follows
// the last slash, so registry ports are kept in the repository).
func repositoryOf(ref string) (string, bool) {
	slash := strings.LastIndexByte(ref, '/')
	colon := strings.LastIndexByte(ref, ':')
	if colon <= slash || colon == len(ref)-1 || colon == 0 || strings.Contains(ref, "@") {
		return "", false
	}
	return ref[:colon], true
}

// EnsureImages builds every sandbox image whose tag is not present locally
// — or every image when force is set, then without the build cache so
// packages are fetched afresh — each after its parent, several at once
// (buildParallelism; each output line names its build). Each image is two builds
// (images.Plan): its core image (images.CoreTag; language images get
// BASE_IMAGE=<parent's core tag>), then its final image (images.Tag), the core
// plus the embedded supervisor. It returns the tags it built. The Debian base
// (images.BaseRef) must already be present: it is never pulled. A binary built
// without the supervisor is refused (images.ErrNoSupervisor).
func EnsureImages(ctx context.Context, cli *client.Client, force bool, log io.Writer) ([]string, error) {
	builds, err := images.Plan()
	if err != nil {
		return nil, err
	}
	return ensureBuilds(ctx, cli, builds, force, log, nil)
}

// buildParallelism is how many image builds run at once. The language
// images are independent children of the base: on a fresh machine
// `make run` waits for all of them, and their steps (package downloads,
// the Go seed's compile) overlap well on two cores.
const buildParallelism = 3

// ensureBuilds runs builds in plan order (runInPlanOrder), skipping those
// whose tag is present unless force is set. ready (may be nil) hears each
// tag as it is there, built or found. It returns the tags it built, in the
// order of builds; after a failure it starts no more builds and returns the
// first error.
func ensureBuilds(ctx context.Context, cli *client.Client, builds []images.Build, force bool, log io.Writer, ready func(tag string)) ([]string, error) {
	if log == nil {
		log = io.Discard
	}
	present, err := ImagePresent(ctx, cli, images.BaseRef)
	if err != nil {
		return nil, err
	}
	if !present {
		return nil, fmt.Errorf("base image %s is not present locally and images are never pulled: run scripts/base-image.sh (it pulls or debootstraps it), then retry", images.BaseRef)
	}
	extraCA, err := buildExtraCA()
	if err != nil {
		return nil, err
	}
	var logMu sync.Mutex
	builtTags := make([]string, len(builds))
	err = runInPlanOrder(ctx, builds, buildParallelism, func(ctx context.Context, i int) error {
		b := builds[i]
		out := &buildLog{mu: &logMu, w: log, prefix: "[" + strings.TrimPrefix(b.Tag, "sandboxer/") + "] "}
		didBuild, err := ensureBuild(ctx, cli, b, extraCA, force, out)
		out.flush()
		if err != nil {
			return err
		}
		if didBuild {
			builtTags[i] = b.Tag
		}
		if ready != nil {
			ready(b.Tag)
		}
		return nil
	})
	var built []string
	for _, tag := range builtTags {
		if tag != "" {
			built = append(built, tag)
		}
	}
	return built, err
}

// runInPlanOrder runs run(i) for each build, after its parent (parentOf)
// when the parent is one of builds, up to parallel at once. A free place
// goes to the ready build earliest in builds: the plan's order is its
// priority, and a final image, next after its core, never waits behind
// another core. After a failure it starts no more, waits for those
// running, and returns the first error.
func runInPlanOrder(ctx context.Context, builds []images.Build, parallel int, run func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	index := make(map[string]int, len(builds))
	for i, b := range builds {
		index[b.Tag] = i
	}
	type result struct {
		i   int
		err error
	}
	results := make(chan result)
	started, finished := make([]bool, len(builds)), make([]bool, len(builds))
	canStart := func(i int) bool {
		p, hasParent := index[parentOf(builds[i])]
		return !started[i] && (!hasParent || finished[p])
	}
	var firstErr error
	running := 0
	for {
		for firstErr == nil && ctx.Err() == nil && running < parallel {
			next := -1
			for i := range builds {
				if canStart(i) {
					next = i
					break
				}
			}
			if next < 0 {
				break
			}
			started[next] = true
			running++
			go func() { results <- result{next, run(ctx, next)} }()
		}
		if running == 0 {
			break
		}
		r := <-results
		running--
		if r.err != nil && firstErr == nil {
			firstErr = r.err
			cancel()
		}
		finished[r.i] = r.err == nil
	}
	if firstErr == nil && slices.Contains(started, false) {
		return ctx.Err() // ended before every build started
	}
	return firstErr
}

// ensureBuild makes one build unless its tag is present on the parent it
// names (or force is set); it says whether it built.
func ensureBuild(ctx context.Context, cli *client.Client, b images.Build, extraCA string, force bool, log io.Writer) (bool, error) {
	if extraCA != "" && !b.Final {
		b.BuildArgs = maps.Clone(b.BuildArgs)
		if b.BuildArgs == nil {
			b.BuildArgs = map[string]string{}
		}
		b.BuildArgs[ExtraCABuildArg] = extraCA
	}
	if !force {
		present, err := ImagePresent(ctx, cli, b.Tag)
		if err != nil {
			return false, err
		}
		if present {
			parent := parentOf(b)
			ok, err := builtOn(ctx, cli, b.Tag, parent)
			if err != nil {
				return false, err
			}
			if ok {
				fmt.Fprintf(log, "==> %s is up to date\n", b.Tag)
				return false, nil
			}
			// Two builds at once can each make the parent; a
			// child of the one that lost its tag is made again.
			fmt.Fprintf(log, "==> %s was built on another %s than the one tagged now\n", b.Tag, parent)
		}
	}
	fmt.Fprintf(log, "==> building %s\n", b.Tag)
	start := time.Now()
	if err := buildImage(ctx, cli, b.Tag, b.Context, b.BuildArgs, force, log); err != nil {
		return false, err
	}
	fmt.Fprintf(log, "==> built %s in %s\n", b.Tag, time.Since(start).Round(100*time.Millisecond))
	return true, nil
}

// buildLog writes one build's output to a log that builds running at once
// share: whole lines, each with the build's prefix.
type buildLog struct {
	mu      *sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

func (l *buildLog) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	i := bytes.LastIndexByte(l.partial, '\n')
	if i < 0 {
		return len(p), nil
	}
	l.emit(l.partial[:i+1])
	l.partial = append(l.partial[:0], l.partial[i+1:]...)
	return len(p), nil
}

// flush writes a last line that has no newline.
func (l *buildLog) flush() {
	if len(l.partial) > 0 {
		l.emit(append(l.partial, '\n'))
		l.partial = nil
	}
}

func (l *buildLog) emit(lines []byte) {
	var b bytes.Buffer
	for _, line := range bytes.SplitAfter(lines, []byte("\n")) {
		if len(line) > 0 {
			b.WriteString(l.prefix)
			b.Write(line)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(b.Bytes())
}

// parentOf is the image a build starts from that ensureBuilds also makes
// ("" for the base): a final image's core, a language core's parent core.
func parentOf(b images.Build) string {
	if b.Final {
		return images.CoreTag(b.Image)
	}
	return b.BuildArgs[images.BaseImageArg]
}

// builtOn says whether tag's layers start with parent's (true when there
// is no parent to check, or it is missing and so is built first).
func builtOn(ctx context.Context, cli *client.Client, tag, parent string) (bool, error) {
	if parent == "" {
		return true, nil
	}
	p, err := cli.ImageInspect(ctx, parent)
	if cerrdefs.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect image %s: %w", parent, err)
	}
	c, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		return false, fmt.Errorf("inspect image %s: %w", tag, err)
	}
	pl, cl := p.RootFS.Layers, c.RootFS.Layers
	if len(pl) == 0 { // an engine that does not list layers: nothing to tell
		return true, nil
	}
	return len(cl) > len(pl) && slices.Equal(cl[:len(pl)], pl), nil
}

// ExtraCABuildArg is the build argument through which core image builds that
// download from registries (npm, the Go module proxy) receive an extra CA
// bundle (PEM): on hosts whose egress intercepts TLS with its own CA.
const ExtraCABuildArg = "SANDBOXER_EXTRA_CA"

// BuildCAFileEnv names the environment variable holding the path of that PEM
// bundle on the server's host; unset means none. The file's content, not its
// path, reaches the build, so this works with a remote engine too.
const BuildCAFileEnv = "SANDBOXER_BUILD_CA_FILE"

func buildExtraCA() (string, error) {
	path := os.Getenv(BuildCAFileEnv)
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", BuildCAFileEnv, err)
	}
	if len(data) > 1<<20 || !bytes.Contains(data, []byte("-----BEGIN CERTIFICATE-----")) {
		return "", fmt.Errorf("%s: %s is not a PEM certificate bundle of at most 1 MiB", BuildCAFileEnv, path)
	}
	return strings.TrimSpace(string(data)), nil
}
