package program

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// figurePollInterval is how often a running job's figures directory is
// looked at: a REPL's figures come back cell by cell, not at its end.
const figurePollInterval = 200 * time.Millisecond

// figures sends a job's figures (proto.Collect.FiguresDir) while it runs and
// once more at its end, at most proto.MaxFigures in all.
type figures struct {
	dir   string
	out   *frameWriter
	sent  int
	notes []string
	stop  chan struct{}
	done  chan struct{}
}

// watchFigures starts sending c's figures as they appear (nil: none asked).
func watchFigures(c *proto.Collect, out *frameWriter) *figures {
	if c == nil || c.FiguresDir == "" {
		return nil
	}
	f := &figures{dir: c.FiguresDir, out: out, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		t := time.NewTicker(figurePollInterval)
		defer t.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-t.C:
				f.send()
			}
		}
	}()
	return f
}

// finish stops the watch and sends what is left; its notes go to events.
func (f *figures) finish(events *[]string) {
	if f == nil {
		return
	}
	close(f.stop)
	<-f.done
	f.send()
	for _, n := range f.notes {
		if len(*events) < proto.MaxEvents {
			*events = append(*events, n)
		}
	}
}

// send sends the whole PNGs in the directory, oldest first, and removes
// them (a workspace's /tmp outlives the job). A figure is renamed into
// place once whole (*.png.part before), so none is read half-written.
func (f *figures) send() {
	root, err := os.OpenRoot(f.dir)
	if err != nil {
		return // no figure was made
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return
	}
	type figure struct {
		name string
		info fs.FileInfo
	}
	var figs []figure
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || !strings.HasSuffix(e.Name(), ".png") {
			continue
		}
		figs = append(figs, figure{e.Name(), info})
	}
	sort.Slice(figs, func(i, j int) bool {
		a, b := figs[i].info.ModTime(), figs[j].info.ModTime()
		return a.Before(b) || a.Equal(b) && figs[i].name < figs[j].name
	})
	note := func(format string, args ...any) { f.notes = append(f.notes, fmt.Sprintf(format, args...)) }
	for _, fig := range figs {
		switch {
		case f.sent == proto.MaxFigures:
			note("figures: %s left out (at most %d a job)", fig.name, proto.MaxFigures)
		case fig.info.Size() > proto.MaxFigureBytes:
			note("figures: %s left out: %d bytes, at most %d", fig.name, fig.info.Size(), proto.MaxFigureBytes)
		default:
			if sendFile(root, fig.name, proto.FileHeader{Path: fig.name, Kind: proto.KindFigure}, proto.MaxFigureBytes, f.out, note) {
				f.sent++
			}
		}
		_ = root.Remove(fig.name)
	}
}

// collectFiles sends the files the job's patterns match (proto.Collect),
// once its processes are gone. Everything is read through an os.Root, with
// links never followed, so a link the job left cannot return a file from
// outside the directory. The supervisor runs as the job's user: it reads
// nothing the job could not.
func collectFiles(c *proto.Collect, out *frameWriter, events *[]string) {
	if c == nil || len(c.Patterns) == 0 {
		return
	}
	note := func(format string, args ...any) {
		if len(*events) < proto.MaxEvents {
			*events = append(*events, fmt.Sprintf(format, args...))
		}
	}
	sendMatches(c, out, note)
}

// sendMatches walks Dir and sends (or names) the regular files a pattern
// matches, within the caps.
func sendMatches(c *proto.Collect, out *frameWriter, note func(string, ...any)) {
	root, err := os.OpenRoot(c.Dir)
	if err != nil {
		note("returns: %v", err)
		return
	}
	defer root.Close()
	var matches []string
	visited := 0
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skipped
		}
		if visited++; visited > proto.MaxCollectWalk {
			note("returns: stopped looking after %d entries", proto.MaxCollectWalk)
			return fs.SkipAll
		}
		if p == "." || !d.Type().IsRegular() {
			return nil // directories are walked; links and devices never returned
		}
		for _, pat := range c.Patterns {
			if proto.MatchPattern(pat, p) {
				matches = append(matches, p)
				break
			}
		}
		return nil
	})
	if err != nil {
		note("returns: %v", err)
	}
	sort.Strings(matches)
	left := c.MaxBytes
	for i, p := range matches {
		if i == proto.MaxReturnFiles {
			note("returns: %d matching files left out (at most %d a job)", len(matches)-i, proto.MaxReturnFiles)
			break
		}
		info, err := root.Lstat(p)
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		h := proto.FileHeader{Path: p, Kind: proto.KindFile, Size: info.Size()}
		if c.ListOnly {
			h.Listed = true
			out.file(h, nil)
			continue
		}
		if info.Size() > left {
			note("returns: %s left out: %d bytes, over what is left of the cap (%d)", p, info.Size(), left)
			continue
		}
		if sendFile(root, p, h, left, out, note) {
			left -= info.Size()
		}
	}
}

// sendFile sends one regular file (at most limit bytes) as File frames.
func sendFile(root *os.Root, name string, h proto.FileHeader, limit int64, out *frameWriter, note func(string, ...any)) bool {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		note("returns: %s: %v", name, err)
		return false
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() || info.Size() > limit {
		return false
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil || int64(len(data)) > limit {
		note("returns: %s: not read whole", name)
		return false
	}
	h.Size = int64(len(data))
	for off := 0; ; off += proto.FileChunk {
		end := min(off+proto.FileChunk, len(data))
		h.Offset = int64(off)
		out.file(h, data[off:end])
		if end == len(data) {
			return true
		}
	}
}

// file writes one File frame.
func (fw *frameWriter) file(h proto.FileHeader, part []byte) {
	p, err := proto.EncodeFile(h, part)
	if err != nil {
		logger.Printf("file frame for %s: %v", path.Base(h.Path), err)
		return
	}
	fw.frame(proto.TypeFile, p)
}
