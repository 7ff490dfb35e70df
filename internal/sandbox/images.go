package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// LabelTemplate marks an image the server built for a template (its name);
// LabelTemplateKey carries the template's cache key.
const (
	LabelTemplate    = "dev.sandboxer.template"
	LabelTemplateKey = "dev.sandboxer.template-key"
)

// ImageBuilder builds, commits, measures and removes the images of
// templates (internal/template). Nothing is ever pulled: every FROM image
// must be present.
type ImageBuilder interface {
	// BuildImage builds req.Context (a tar with a Dockerfile at its root),
	// tagging the result req.Tag; each line of build output goes to
	// progress. A build the engine reports failed is a *BuildError.
	BuildImage(ctx context.Context, req ImageBuild, progress func(line string)) error
	// CommitWorkspace makes an image of a workspace container's root
	// filesystem (what installs added) with config: the container's own
	// labels and variables that config lacks are left empty.
	CommitWorkspace(ctx context.Context, workspaceContainer, tag string, config ImageConfig) error
	// ImageInfo describes an image; ErrImageNotFound when it is absent.
	ImageInfo(ctx context.Context, ref string) (ImageInfo, error)
	// RemoveImage removes an image by reference; an absent one is no error.
	RemoveImage(ctx context.Context, ref string) error
	// ImagesInUse are the image ids any container (running or not) was made from.
	ImagesInUse(ctx context.Context) (map[string]bool, error)
}

// SandboxImageBuilder builds the language images (images.Plan) an engine
// lacks while the server serves: until one is built, ImageExists and a
// start on it answer an ImageError whose Building is set.
type SandboxImageBuilder interface {
	// BuildMissingImages starts the builds and returns at once; each line
	// of their output goes to log, and done says how they ended.
	BuildMissingImages(ctx context.Context, log io.Writer) (done <-chan error, err error)
}

// ImageBuild is one build.
type ImageBuild struct {
	Tag       string
	Context   []byte // tar, Dockerfile at its root
	BuildArgs map[string]string
	// Network of the build's RUN steps: "none", "bridge" or NetworkEgress
	// (BuildArgs then carry the proxy's environment).
	Network string
	NoCache bool
	Labels  map[string]string
}

// ImageConfig is what a committed image runs as.
type ImageConfig struct {
	User       string
	Env        []string
	WorkingDir string
	Entrypoint []string
	Cmd        []string
	Labels     map[string]string
}

// ImageInfo is an image as the engine describes it.
type ImageInfo struct {
	ID      string
	Size    int64
	Created time.Time
	Labels  map[string]string
	Config  ImageConfig
}

// ErrImageNotFound is an image the engine does not have.
var ErrImageNotFound = errors.New("image not found")

// BuildError is a build the engine reported as failed: the step that
// failed, its exit code (-1 when the engine gave none) and the last lines
// of the build's output.
type BuildError struct {
	Step     string // e.g. "Step 3/4 : RUN make"
	ExitCode int
	Message  string // the engine's message
	Tail     []string
}

func (e *BuildError) Error() string {
	var b strings.Builder
	if e.Step != "" {
		fmt.Fprintf(&b, "%s failed", e.Step)
		if e.ExitCode >= 0 {
			fmt.Fprintf(&b, " with exit code %d", e.ExitCode)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "\n--- last %d lines of the build ---\n%s", len(e.Tail), strings.Join(e.Tail, "\n"))
	}
	return b.String()
}
