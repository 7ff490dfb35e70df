package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// The fake's images (sandbox.ImageBuilder). Every image is present unless
// SetImageMissing or RemoveImage made it absent; one the fake did not
// build is empty, of a nominal size. A build runs its RUN steps as fake
// scripts on the image's files, and a sandbox made from an image starts
// with a copy of them. Nothing is ever pulled: a FROM image must be present.

// presentImageSize is the size the fake gives an image it did not build.
const presentImageSize = 1 << 20

// buildTailLines is how many lines of output a failed build reports.
const buildTailLines = 50

// image is one the fake built or committed: its description and its files.
type image struct {
	info  sandbox.ImageInfo
	files map[string]string
}

var _ sandbox.ImageBuilder = (*Runtime)(nil)

// imageLocked is ref, or false when it is absent (e.mu held).
func (e *Engine) imageLocked(ref string) (*image, bool) {
	if !e.presentLocked(ref) {
		return nil, false
	}
	if img := e.images[ref]; img != nil {
		return img, true
	}
	sum := sha256.Sum256([]byte(ref))
	return &image{info: sandbox.ImageInfo{ID: "sha256:" + hex.EncodeToString(sum[:]), Size: presentImageSize,
		Config: sandbox.ImageConfig{User: "1000:1000", WorkingDir: "/workspace"}}}, true
}

// rootFiles is a new sandbox's tree: a copy of its image's files, with the
// volumes its mounts name over it (a volume that does not exist yet is
// made, as engines do; host directories are not modelled). e.mu held.
func (e *Engine) rootFiles(ref string, mounts []sandbox.Mount) *files {
	f := newFiles()
	if img, ok := e.imageLocked(ref); ok && img.files != nil {
		f = withFiles(img.files)
	}
	for _, m := range mounts {
		if m.Volume != "" {
			f.mounts = append(f.mounts, mount{target: path.Clean(m.Target), vol: e.volumes.filesOf(m.Volume), readOnly: m.ReadOnly})
		}
	}
	return f
}

// addImage stores img under tag, replacing what the tag named.
func (e *Engine) addImage(tag string, img *image) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.images[tag] = img
	e.missing[tag] = false
}

func (r *Runtime) ImageInfo(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return sandbox.ImageInfo{}, engineDown()
	}
	img, ok := r.imageLocked(ref)
	if !ok {
		return sandbox.ImageInfo{}, fmt.Errorf("%w: %s", sandbox.ErrImageNotFound, ref)
	}
	info := img.info
	info.Labels = maps.Clone(info.Labels)
	return info, nil
}

// RemoveImage makes ref absent; an absent one is no error.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return engineDown()
	}
	delete(r.images, ref)
	r.missing[ref] = true
	return nil
}

// ImagesInUse are the ids of the images of every container of the engine.
func (r *Runtime) ImagesInUse(ctx context.Context) (map[string]bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, engineDown()
	}
	used := map[string]bool{}
	for _, c := range r.containers {
		if img, ok := r.imageLocked(c.image); ok && c.image != "" {
			used[img.info.ID] = true
		}
	}
	return used, nil
}

// CommitWorkspace makes an image of a workspace container's files, its
// volume (/workspace) left out, with config.
func (r *Runtime) CommitWorkspace(ctx context.Context, id, tag string, config sandbox.ImageConfig) error {
	c, err := r.existing(id)
	if err != nil {
		return err
	}
	r.addImage(tag, newImage(c.fs.snapshot("/workspace"), config, config.Labels))
	return nil
}

// newImage describes files as an image run as config: a new id each time,
// as a commit or a rebuild is a new image on the engines.
func newImage(files map[string]string, config sandbox.ImageConfig, labels map[string]string) *image {
	size := int64(presentImageSize)
	for _, data := range files {
		size += int64(len(data))
	}
	config.Labels = nil
	return &image{files: files, info: sandbox.ImageInfo{ID: "sha256:" + newID(), Size: size,
		Created: time.Now(), Labels: maps.Clone(labels), Config: config}}
}

// stage is a build stage's state.
type stage struct {
	files  map[string]string
	config sandbox.ImageConfig
	labels map[string]string
	args   map[string]string // ARGs declared in the stage, for RUN's environment
}

// newStage starts a stage on copies of a parent's files, config and labels
// (none for scratch).
func newStage(files map[string]string, config sandbox.ImageConfig, labels map[string]string) *stage {
	config.Env = slices.Clone(config.Env)
	st := &stage{files: maps.Clone(files), config: config, labels: maps.Clone(labels), args: map[string]string{}}
	if st.files == nil {
		st.files = map[string]string{}
	}
	if st.labels == nil {
		st.labels = map[string]string{}
	}
	return st
}

// BuildImage runs a Dockerfile's instructions on its FROM image's files:
// FROM (an image or an earlier stage), ARG, ENV, WORKDIR, USER, LABEL,
// CMD, ENTRYPOINT, COPY from the context, and RUN as a fake script on the
// build's network.
func (r *Runtime) BuildImage(ctx context.Context, req sandbox.ImageBuild, progress func(string)) error {
	if r.isDown() {
		return engineDown()
	}
	if req.Network == sandbox.NetworkEgress && r.egress == EgressTunnelled {
		return errors.New("a template build on network egress needs an egress network: this engine's sandboxes reach the proxy only through a tunnel, which a build cannot have (build with network none)")
	}
	dockerfile, err := images.CheckParents(req.Context, req.BuildArgs, func(ref string) (bool, error) { return r.ImageExists(ctx, ref) })
	if err != nil {
		return err
	}
	var tail []string
	say := func(line string) {
		if progress != nil {
			progress(line)
		}
		tail = append(tail, line)
		if len(tail) > buildTailLines {
			tail = tail[1:]
		}
	}
	steps := images.Instructions(dockerfile)
	var metaArgs []string // ARGs before the first FROM, which FROM lines expand
	stages := map[string]*stage{}
	var cur *stage
	for i, line := range steps {
		step := fmt.Sprintf("Step %d/%d : %s", i+1, len(steps), line)
		say(step)
		kw, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		kw = strings.ToUpper(kw)
		if cur == nil && kw != "FROM" && kw != "ARG" {
			return &sandbox.BuildError{Step: step, ExitCode: -1, Message: "no FROM before " + kw, Tail: tail}
		}
		switch kw {
		case "ARG":
			if cur == nil {
				metaArgs = append(metaArgs, line)
				continue
			}
			for _, decl := range strings.Fields(rest) {
				name, def, _ := strings.Cut(decl, "=")
				if v, ok := req.BuildArgs[name]; ok {
					def = v
				}
				cur.args[name] = strings.Trim(def, `"'`)
			}
		case "FROM":
			words := strings.Fields(rest)
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				words = words[1:]
			}
			if len(words) == 0 {
				return fmt.Errorf("Dockerfile: FROM without an image: %q", line)
			}
			next := newStage(nil, sandbox.ImageConfig{}, nil) // scratch
			if earlier := stages[strings.ToLower(words[0])]; earlier != nil {
				next = newStage(earlier.files, earlier.config, earlier.labels)
			} else if refs, err := images.FromImages(strings.Join(append(metaArgs, "FROM "+words[0]), "\n"), req.BuildArgs); err != nil {
				return fmt.Errorf("Dockerfile: %w", err)
			} else if len(refs) == 1 {
				r.mu.Lock()
				img, _ := r.imageLocked(refs[0])
				r.mu.Unlock()
				next = newStage(img.files, img.info.Config, img.info.Labels)
			}
			if len(words) >= 3 && strings.EqualFold(words[1], "AS") {
				stages[strings.ToLower(words[2])] = next
			}
			cur = next
		case "ENV":
			for k, v := range keyValues(rest) {
				cur.config.Env = append(cur.config.Env, k+"="+v)
			}
		case "LABEL":
			maps.Copy(cur.labels, keyValues(rest))
		case "WORKDIR":
			cur.config.WorkingDir = path.Join("/", cur.config.WorkingDir, rest)
		case "USER":
			cur.config.User = rest
		case "CMD", "ENTRYPOINT":
			var argv []string
			if json.Unmarshal([]byte(rest), &argv) != nil {
				argv = []string{"/bin/sh", "-c", rest}
			}
			if kw == "CMD" {
				cur.config.Cmd = argv
			} else {
				cur.config.Entrypoint = argv
			}
		case "COPY", "ADD":
			if err := copyFromContext(req.Context, rest, cur); err != nil {
				return &sandbox.BuildError{Step: step, ExitCode: -1, Message: err.Error(), Tail: tail}
			}
		case "RUN":
			code, err := r.buildStep(ctx, rest, req.Network, cur, say)
			if err != nil {
				return fmt.Errorf("build %s stopped at %q: %w", req.Tag, step, err)
			}
			if code != 0 {
				return &sandbox.BuildError{Step: step, ExitCode: code, Tail: tail,
					Message: fmt.Sprintf("The command '/bin/sh -c %s' returned a non-zero code: %d", rest, code)}
			}
		case "EXPOSE", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "ONBUILD", "MAINTAINER":
		default:
			return &sandbox.BuildError{Step: step, ExitCode: -1, Message: "unknown instruction: " + kw, Tail: tail}
		}
	}
	labels := cur.labels
	maps.Copy(labels, req.Labels)
	r.addImage(req.Tag, newImage(cur.files, cur.config, labels))
	say("Successfully tagged " + req.Tag)
	return nil
}

// buildStep runs one RUN step, a fake script, on the stage's files and
// build network; its output goes to say a line at a time.
func (r *Runtime) buildStep(ctx context.Context, script, network string, st *stage, say func(string)) (int, error) {
	c := newContainer(r.Engine, sandbox.Container{ID: newID()}, sandbox.Spec{Cmd: []string{"/bin/sh", "-c", script}, Network: network}, 0)
	c.fs = withFiles(st.files)
	c.reach = r.reachOf(network)
	for k, v := range st.args {
		c.env = append(c.env, k+"="+v)
	}
	c.env = append(c.env, st.config.Env...)
	code, err := runToEnd(ctx, c)
	if err != nil {
		return -1, err
	}
	var out bytes.Buffer
	c.mu.Lock()
	for _, ch := range c.log {
		out.Write(ch.data)
	}
	c.mu.Unlock()
	for _, line := range strings.SplitAfter(out.String(), "\n") {
		if line != "" {
			say(strings.TrimSuffix(line, "\n"))
		}
	}
	st.files = c.fs.snapshot()
	return code, nil
}

// runToEnd starts c, unlisted, and waits for its end or ctx's (which kills it).
func runToEnd(ctx context.Context, c *container) (int, error) {
	c.start()
	select {
	case <-c.exited:
	case <-ctx.Done():
		c.kill()
		<-c.exited
		return -1, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitCode, nil
}

// copyFromContext copies COPY's sources (files or directories of the build
// context) to its destination in st.
func copyFromContext(contextTar []byte, args string, st *stage) error {
	var words []string
	for _, w := range strings.Fields(args) {
		if !strings.HasPrefix(w, "--") { // --chown, --chmod: the fake keeps no owners
			words = append(words, w)
		}
	}
	if len(words) < 2 {
		return fmt.Errorf("COPY needs a source and a destination: %q", args)
	}
	dest, srcs := words[len(words)-1], words[:len(words)-1]
	if !path.IsAbs(dest) {
		dest = path.Join("/", st.config.WorkingDir, dest)
	}
	for _, src := range srcs {
		src = strings.Trim(path.Clean("/"+src), "/")
		found := false
		tr := tar.NewReader(bytes.NewReader(contextTar))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("build context: %w", err)
			}
			name := strings.Trim(path.Clean("/"+h.Name), "/")
			if h.Typeflag != tar.TypeReg || (name != src && !strings.HasPrefix(name, src+"/") && src != "") {
				continue
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("build context: %w", err)
			}
			target := dest
			switch {
			case name == src && (len(srcs) > 1 || strings.HasSuffix(words[len(words)-1], "/")):
				target = path.Join(dest, path.Base(name))
			case name != src:
				target = path.Join(dest, strings.TrimPrefix(strings.TrimPrefix(name, src), "/"))
			}
			st.files[target] = string(b)
			found = true
		}
		if !found {
			return fmt.Errorf("COPY failed: file not found in build context: %s", src)
		}
	}
	return nil
}

// keyValues reads ENV's and LABEL's "k=v k2=v2" (or the old "k v").
func keyValues(s string) map[string]string {
	out := map[string]string{}
	words := strings.Fields(s)
	if len(words) > 0 && !strings.Contains(words[0], "=") {
		out[words[0]] = strings.TrimSpace(strings.TrimPrefix(s, words[0]))
		return out
	}
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		out[k] = strings.Trim(v, `"'`)
	}
	return out
}

// BuildMissingImages builds, in the background, every image marked as
// being built (SetImageBuilding), as the Docker runtime builds the images
// it lacks: one "==> built REF" line each to log, then done.
func (r *Runtime) BuildMissingImages(ctx context.Context, log io.Writer) (<-chan error, error) {
	if err := r.Ping(ctx); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		r.mu.Lock()
		var refs []string
		for ref, building := range r.building {
			if building {
				refs = append(refs, ref)
			}
		}
		r.mu.Unlock()
		slices.Sort(refs)
		if len(refs) == 0 {
			fmt.Fprintln(log, "==> every image is present")
		}
		for _, ref := range refs {
			r.mu.Lock()
			r.building[ref], r.missing[ref] = false, false
			r.mu.Unlock()
			fmt.Fprintf(log, "==> built %s\n", ref)
		}
		done <- nil
	}()
	return done, nil
}
