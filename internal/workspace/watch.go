package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// watchStartTimeout bounds how long a watch may take to begin.
const watchStartTimeout = 30 * time.Second

// Watch follows changes under a path of a workspace (a file, or a directory
// and everything under it) with the supervisor's watch (proto.WatchCommand),
// run in the workspace's container: changed hears each batch of changed
// paths (more: some were left out, read again). It returns once the watch
// has begun, or why it could not; done then yields nil when the path went or
// ctx ended, or the error that ended it. The workspace counts as in use
// while it is watched.
func (m *Manager) Watch(ctx context.Context, name, rel string, changed func(paths []string, more bool)) (done <-chan error, err error) {
	ctx, cancel := context.WithCancel(ctx)
	stdinR, stdinW := io.Pipe()
	stop := context.AfterFunc(ctx, func() { stdinW.Close() }) // the helper ends when its stdin does
	ready := make(chan error, 1)
	var began atomic.Bool
	lines := &lineSplitter{max: 1 << 20, line: func(line []byte) {
		var ev proto.WatchEvent
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		switch {
		case ev.Error != "" && !began.Load():
			ready <- &FileError{Kind: ev.ErrorKind, Msg: ev.Error}
		case ev.Ready && !began.Swap(true):
			ready <- nil
		case len(ev.Paths) > 0 || ev.More:
			changed(ev.Paths, ev.More)
		}
	}}
	var errb capped
	errb.max = 4096
	end := make(chan error, 1)
	go func() {
		defer stop()
		defer cancel()
		code, err := m.Exec(ctx, name, sandbox.ExecOptions{
			Cmd:   []string{supervisorPath, proto.WatchCommand, rel},
			Stdin: stdinR, Stdout: lines, Stderr: &errb,
		})
		if err == nil && code != 0 && !began.Load() {
			err = fmt.Errorf("the watch helper in workspace %q failed (exit %d): %s (an image built before watches lacks it: run `sandboxer images build`, then delete and create the workspace)",
				name, code, strings.TrimSpace(errb.buf.String()))
		}
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			err = nil
		}
		if !began.Load() && err == nil {
			err = fmt.Errorf("the watch of %s in workspace %q ended before it began", rel, name)
		}
		select {
		case ready <- err: // it ended before it began
		default:
		}
		end <- err
	}()
	t := time.NewTimer(watchStartTimeout)
	defer t.Stop()
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			return nil, err
		}
		return end, nil
	case <-t.C:
		cancel()
		return nil, fmt.Errorf("the watch of %s in workspace %q did not begin within %s", rel, name, watchStartTimeout)
	}
}

// lineSplitter calls line for each whole line written (a line over max is
// dropped).
type lineSplitter struct {
	buf  []byte
	max  int
	line func([]byte)
}

func (l *lineSplitter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > l.max {
				l.buf = l.buf[:0]
			}
			return len(p), nil
		}
		l.line(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}
