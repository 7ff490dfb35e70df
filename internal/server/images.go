package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// imageBuildLog is the file in the state directory that gets the whole
// output of the image builds serve --build-images starts.
const imageBuildLog = "image-build.log"

// buildImages starts building the sandbox images the engine lacks (serve
// --build-images), so a first start serves before they are made. The
// server log says when each is built; the builds' whole output goes to
// imageBuildLog. An engine that does not answer is only warned of, as at
// any start; a setup that cannot build (no Debian base, no supervisor in
// this binary) stops the start.
func (s *Server) buildImages(ctx context.Context) error {
	builder := s.engine.Capabilities().SandboxImages
	if builder == nil {
		return fmt.Errorf("--build-images: backend %s does not build images", s.cfg.Policy.Backend)
	}
	path := filepath.Join(s.cfg.StateDir, imageBuildLog)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("--build-images: %w", err)
	}
	pr, pw := io.Pipe()
	go logBuildLines(pr, f, s.log)
	done, err := builder.BuildMissingImages(ctx, pw)
	if err != nil {
		pw.Close()
		if errors.Is(err, sandbox.ErrEngineUnreachable) {
			s.log.Warn().Err(err).Msg("--build-images: the engine does not answer, so no images are built")
			return nil
		}
		return fmt.Errorf("--build-images: %w", err)
	}
	s.log.Info().Str("log", path).Msg("building the missing sandbox images in the background; jobs on them say so until they are built")
	go func() {
		err := <-done
		pw.Close()
		if err != nil {
			s.log.Error().Err(err).Str("log", path).Msg("building the sandbox images failed: jobs on the missing ones fail until `make images` builds them")
		}
	}()
	return nil
}

// logBuildLines copies the builds' output to f, and each summary line
// ("==> building", "==> built … in") to the server log, but for images
// found up to date.
func logBuildLines(r io.Reader, f *os.File, log zerolog.Logger) {
	defer f.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(f, line)
		if _, summary, ok := strings.Cut(line, "==> "); ok && !strings.HasSuffix(summary, " is up to date") {
			log.Info().Msg("image build: " + summary)
		}
	}
	_, _ = io.Copy(f, r) // a line past the scanner's bound: keep the rest, unlogged
}
