package docker

// Template images (sandbox.ImageBuilder): builds through the Engine API's
// classic builder, never pulling; commits of workspace containers with a
// config of the server's own; sizes, removal, and which images are in use.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.ImageBuilder = (*Runtime)(nil)

// templateTailLines is how many lines of output a failed template build reports.
const templateTailLines = 50

// BuildImage implements sandbox.ImageBuilder.
func (r *Runtime) BuildImage(ctx context.Context, req sandbox.ImageBuild, progress func(string)) error {
	if req.Network == sandbox.NetworkEgress && r.tunnels() {
		// A build's RUN steps get no exec of ours to carry a tunnel.
		return errors.New("a template build on network egress needs Docker's egress network: on Podman sandboxes reach the proxy only through a tunnel, which a build cannot have (build the template on Docker, or with network none)")
	}
	if _, err := images.CheckParents(req.Context, req.BuildArgs, func(ref string) (bool, error) {
		present, err := ImagePresent(ctx, r.cli, ref)
		if err != nil {
			return false, r.engineErr(err)
		}
		return present, nil
	}); err != nil {
		return err
	}
	args := make(map[string]*string, len(req.BuildArgs))
	for k, v := range req.BuildArgs {
		args[k] = &v
	}
	res, err := r.cli.ImageBuild(ctx, bytes.NewReader(req.Context), client.ImageBuildOptions{
		Tags:        []string{req.Tag},
		Dockerfile:  "Dockerfile",
		BuildArgs:   args,
		Labels:      req.Labels,
		NetworkMode: r.engineNetwork(req.Network),
		Remove:      true,
		ForceRemove: true,
		NoCache:     req.NoCache,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return r.engineErr(fmt.Errorf("build %s: %w", req.Tag, err))
	}
	defer res.Body.Close()
	steps := &stepLog{tail: newLineTail(templateTailLines), progress: progress}
	if err := decodeBuildStream(res.Body, steps); err != nil {
		steps.flush()
		if bf, ok := err.(*BuildFailedError); ok {
			tail := steps.tail.lines()
			for i := range tail {
				tail[i] = ansiEscape.ReplaceAllString(tail[i], "")
			}
			return &sandbox.BuildError{Step: steps.step, ExitCode: exitCodeOf(bf.Message), Message: bf.Message, Tail: tail}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("build %s stopped at %q: %w", req.Tag, steps.step, ctx.Err())
		}
		return r.engineErr(fmt.Errorf("build %s: %w", req.Tag, err))
	}
	present, err := ImagePresent(ctx, r.cli, req.Tag)
	if err != nil {
		return r.engineErr(err)
	}
	if !present {
		if ctx.Err() != nil {
			return fmt.Errorf("build %s stopped at %q: %w", req.Tag, steps.step, ctx.Err())
		}
		return fmt.Errorf("build %s: the build reported no error but the image does not exist", req.Tag)
	}
	return nil
}

// stepLog follows a build's output: each whole line to progress, the
// current step, and the last lines.
type stepLog struct {
	tail     *lineTail
	progress func(string)
	step     string
	partial  []byte
}

func (s *stepLog) Write(p []byte) (int, error) {
	s.tail.Write(p)
	data := append(s.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		s.line(string(data[:i]))
		data = data[i+1:]
	}
	s.partial = append([]byte(nil), data...)
	return len(p), nil
}

func (s *stepLog) line(l string) {
	l = ansiEscape.ReplaceAllString(strings.TrimRight(l, "\r"), "")
	if stepLine.MatchString(l) {
		s.step = strings.TrimSpace(l)
	}
	if s.progress != nil && strings.TrimSpace(l) != "" {
		s.progress(l)
	}
}

func (s *stepLog) flush() {
	if len(s.partial) > 0 {
		s.line(string(s.partial))
		s.partial = nil
	}
	s.tail.flush()
}

// ansiEscape is a terminal colour code (the builder colours a step's stderr).
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")

// stepLine is a step's header: Docker's "Step 2/5 : RUN ..." and
// Podman's "STEP 2/5: RUN ...".
var stepLine = regexp.MustCompile(`^(Step|STEP) [0-9]+/[0-9]+ ?: `)

// exitCodeOf reads a failed RUN's exit code from the engine's message
// (Docker: "returned a non-zero code: 2"; Podman: "exit status 2"); -1 when none.
func exitCodeOf(msg string) int {
	m := exitCodePattern.FindStringSubmatch(msg)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return n
}

var exitCodePattern = regexp.MustCompile(`(?:non-zero code|exit status|exit code):? ([0-9]+)`)

// CommitWorkspace implements sandbox.ImageBuilder. The engine keeps the
// container's labels and environment in a commit, and an image can unset
// neither: each of the container's labels and variables that config lacks
// is committed empty, so none of the workspace's own (its instance, its
// kind, its name) reaches containers made from the image. The config goes
// as the commit's changes (Dockerfile instructions), which Docker and
// Podman both apply (Podman ignores a commit's config body).
func (r *Runtime) CommitWorkspace(ctx context.Context, workspaceContainer, tag string, cfg sandbox.ImageConfig) error {
	inspect, err := r.cli.ContainerInspect(ctx, workspaceContainer, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("commit: the workspace's container %s is gone", shortID(workspaceContainer))
		}
		return r.engineErr(err)
	}
	labels := map[string]string{}
	env := append([]string(nil), cfg.Env...)
	if c := inspect.Container.Config; c != nil {
		for k := range c.Labels {
			labels[k] = ""
		}
		given := map[string]bool{}
		for _, kv := range cfg.Env {
			k, _, _ := strings.Cut(kv, "=")
			given[k] = true
		}
		for _, kv := range c.Env {
			if k, _, _ := strings.Cut(kv, "="); !given[k] {
				env = append(env, k+"=")
			}
		}
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	_, err = r.cli.ContainerCommit(ctx, workspaceContainer, client.ContainerCommitOptions{
		Reference: tag,
		Comment:   "sandboxer workspace snapshot",
		Config:    &container.Config{}, // Podman wants a body; the changes say it all
		Changes:   commitChanges(sandbox.ImageConfig{User: cfg.User, Env: env, WorkingDir: cfg.WorkingDir, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Labels: labels}),
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("commit: the workspace's container %s is gone", shortID(workspaceContainer))
		}
		return r.engineErr(fmt.Errorf("commit %s: %w", tag, err))
	}
	return nil
}

// ImageInfo implements sandbox.ImageBuilder.
func (r *Runtime) ImageInfo(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	res, err := r.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return sandbox.ImageInfo{}, sandbox.ErrImageNotFound
	}
	if err != nil {
		return sandbox.ImageInfo{}, r.engineErr(fmt.Errorf("inspect image %s: %w", ref, err))
	}
	info := sandbox.ImageInfo{ID: res.ID, Size: res.Size}
	info.Created, _ = time.Parse(time.RFC3339Nano, res.Created)
	if c := res.Config; c != nil {
		info.Labels = c.Labels
		info.Config = sandbox.ImageConfig{User: c.User, Env: c.Env, WorkingDir: c.WorkingDir, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels}
	}
	return info, nil
}

// RemoveImage implements sandbox.ImageBuilder.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	_, err := r.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	return r.engineErr(fmt.Errorf("remove image %s: %w", ref, err))
}

// ImagesInUse implements sandbox.ImageBuilder.
func (r *Runtime) ImagesInUse(ctx context.Context) (map[string]bool, error) {
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, r.engineErr(err)
	}
	used := map[string]bool{}
	for _, c := range res.Items {
		used[c.ImageID] = true
	}
	return used, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// commitChanges is cfg as a commit's Dockerfile instructions.
func commitChanges(cfg sandbox.ImageConfig) []string {
	var out []string
	if cfg.User != "" {
		out = append(out, "USER "+cfg.User)
	}
	if cfg.WorkingDir != "" {
		out = append(out, "WORKDIR "+cfg.WorkingDir)
	}
	for _, kv := range cfg.Env {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, "ENV "+k+"="+strconv.Quote(v))
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Labels)) {
		out = append(out, "LABEL "+strconv.Quote(k)+"="+strconv.Quote(cfg.Labels[k]))
	}
	list := func(s []string) string {
		b, _ := json.Marshal(s)
		if s == nil {
			return "[]"
		}
		return string(b)
	}
	out = append(out, "ENTRYPOINT "+list(cfg.Entrypoint))
	if len(cfg.Cmd) > 0 {
		out = append(out, "CMD "+list(cfg.Cmd))
	}
	return out
}
