package docker

// Images built after the server starts (serve --build-images), so a first
// start serves before its sandbox images are made: until an image's build
// ends, ImageExists and a sandbox started on it answer with a
// sandbox.ImageError whose Building is set, which tells an agent to retry
// in minutes, not to run `make images`.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// pendingImages are the tags a background build has still to make.
type pendingImages struct {
	mu   sync.Mutex
	tags map[string]bool
}

func (p *pendingImages) has(tag string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tags[tag]
}

func (p *pendingImages) add(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tags == nil {
		p.tags = map[string]bool{}
	}
	p.tags[tag] = true
}

func (p *pendingImages) remove(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tags, tag)
}

// clear forgets every tag (the build ended: what it did not make is
// missing, and says so).
func (p *pendingImages) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.tags)
}

// beforeImageReady runs as each build of BuildMissingImages ends, before
// its tag stops being pending: a test holds it to look at the pending state.
var beforeImageReady = func(tag string) {}

// BuildMissingImages builds every sandbox image the engine does not have
// (as EnsureImages does) in the background. It returns once it knows which
// images are missing, marking them as being built, and the channel gets the
// build's result (nil, or its first error, also written to log) when every
// build has ended. It fails at once when the Debian base is missing or the
// binary has no supervisor to put in the images.
func (r *Runtime) BuildMissingImages(ctx context.Context, log io.Writer) (<-chan error, error) {
	builds, err := images.Plan()
	if err != nil {
		return nil, err
	}
	return r.buildMissing(ctx, builds, log)
}

// buildMissing is BuildMissingImages for any plan.
func (r *Runtime) buildMissing(ctx context.Context, builds []images.Build, log io.Writer) (<-chan error, error) {
	if log == nil {
		log = io.Discard
	}
	if ok, err := ImagePresent(ctx, r.cli, images.BaseRef); err != nil {
		return nil, r.engineErr(err)
	} else if !ok {
		return nil, fmt.Errorf("base image %s is not present locally and images are never pulled: run scripts/base-image.sh (it pulls or debootstraps it)", images.BaseRef)
	}
	missing := 0
	for _, b := range builds {
		if !b.Final {
			continue
		}
		ok, err := ImagePresent(ctx, r.cli, b.Tag)
		if err != nil {
			r.pending.clear()
			return nil, r.engineErr(err)
		}
		if !ok {
			r.pending.add(b.Tag)
			missing++
		}
	}
	done := make(chan error, 1)
	if missing == 0 {
		done <- nil
		return done, nil
	}
	go func() {
		built, err := ensureBuilds(ctx, r.cli, builds, false, log, func(tag string) {
			beforeImageReady(tag)
			r.pending.remove(tag)
		})
		if err != nil {
			fmt.Fprintf(log, "==> building the missing images failed: %v\n", err)
		} else {
			fmt.Fprintf(log, "==> %d image builds done: every sandbox image is present\n", len(built))
		}
		// Cleared before the end is told: whoever hears it then finds no
		// image still said to be building (a failed one is missing).
		r.pending.clear()
		done <- err
	}()
	return done, nil
}

// missingImage is the error for a create the engine refused as not found
// when what it did not find is the image (nil when the image is there: the
// engine missed something else, a runtime or a network).
func (r *Runtime) missingImage(ctx context.Context, image string) error {
	ok, err := r.ImageExists(ctx, image)
	if ie := (*sandbox.ImageError)(nil); errors.As(err, &ie) {
		return err
	}
	if err == nil && !ok {
		return &sandbox.ImageError{Image: image}
	}
	return nil
}
