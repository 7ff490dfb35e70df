package workspace

// The user's project in a workspace: an import copies a granted mount's
// tree into a new workspace and keeps it as the baseline; a fork copies
// another workspace; Changes reports what differs from the baseline as a
// patch in git's format. Every tree moves through the engine's archive API
// (tar streams), never through a path on the server's host, and nothing
// here ever writes to a mount's source.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/baseline"
	"github.com/sandboxer/sandboxer/internal/patch"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Import names a granted mount to copy into a new workspace.
type Import struct {
	Name  string        // the mount's name (the policy's)
	Mount sandbox.Mount // its source
}

// Origin is what a new workspace's files came from.
type Origin struct {
	Import string `json:"import,omitempty"` // the mount imported
	From   string `json:"from,omitempty"`   // the workspace forked
	Files  int    `json:"files,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Skipped are what an import left out, each with its reason: sockets,
	// FIFOs, devices, and what the sandbox user may not read (the first
	// ones; SkippedCount counts them all).
	Skipped      []proto.SpecialFile `json:"skipped,omitempty"`
	SkippedCount int                 `json:"skipped_count,omitempty"`
	// Processes says a fork copied its source's processes and memory too
	// (with_processes); ProcessesNote why it copied files only.
	Processes     bool   `json:"processes,omitempty"`
	ProcessesNote string `json:"processes_note,omitempty"`
	// Jobs are the source's running jobs each copy got, adopted there as
	// its own (the tool fills it: the job manager adopts them).
	Jobs []record.CopiedJob `json:"jobs,omitempty"`
}

// importMountPoint is where a helper sees the mount being imported.
const importMountPoint = "/mnt/import"

// Limits of workspace_changes.
const (
	changesMaxFile   = 1 << 20  // a file larger than this is listed, left out of the patch
	changesMaxTotal  = 16 << 20 // content sent by one comparison
	changesMaxOutput = 24 << 20 // the helper's JSON (content is base64)
	changesTimeout   = 5 * time.Minute
)

// ErrNoBaselines: the manager was made without a place for baselines.
var ErrNoBaselines = errors.New("imports are not available in this server (no baseline store)")

func (m *Manager) quota() int64 { return m.pol.Workspaces.DiskMB << 20 }

// importer is an import under way: a helper container that sees the
// mount, and what its scan found.
type importer struct {
	imp    *Import
	helper string
	origin *Origin
}

// prepareImport starts a helper that sees the mount and scans the tree
// (sizes and special files, no content read): a tree past the quota is
// refused here, before anything else is made. close removes the helper.
func (m *Manager) prepareImport(ctx context.Context, image string, imp *Import) (_ *importer, done func(), err error) {
	if m.Baselines == nil {
		return nil, nil, ErrNoBaselines
	}
	mnt := imp.Mount
	mnt.Target, mnt.ReadOnly = importMountPoint, true
	helper, err := m.rt.StartHelper(ctx, image, []sandbox.Mount{mnt})
	if err != nil {
		return nil, nil, fmt.Errorf("import %q: %w", imp.Name, err)
	}
	remove := func() { _ = m.rt.Remove(context.WithoutCancel(ctx), helper) }
	defer func() {
		if err != nil {
			remove()
		}
	}()
	var out, errb capped
	out.max, errb.max = 1<<20, 4096
	code, err := m.rt.Exec(ctx, helper, sandbox.ExecOptions{
		Cmd: []string{supervisorPath, proto.ScanCommand, importMountPoint}, Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("import %q: scan: %w", imp.Name, err)
	}
	var scan proto.ScanResult
	if jerr := json.Unmarshal(out.buf.Bytes(), &scan); jerr != nil {
		return nil, nil, fmt.Errorf("import %q: the scan failed (exit %d): %s", imp.Name, code, strings.TrimSpace(errb.buf.String()))
	}
	if scan.Error != "" {
		return nil, nil, fmt.Errorf("import %q: %s (the server reads the tree as uid 1000: make it readable to that user)", imp.Name, scan.Error)
	}
	if scan.Bytes > m.quota() {
		return nil, nil, fmt.Errorf("import: mount %q holds %d MiB in %d files, more than a workspace may hold (policy workspaces.disk_mb=%d): nothing was made",
			imp.Name, scan.Bytes>>20, scan.Files, m.pol.Workspaces.DiskMB)
	}
	return &importer{imp: imp, helper: helper,
		origin: &Origin{Import: imp.Name, Files: scan.Files, Skipped: scan.Special, SkippedCount: scan.SpecialCount}}, remove, nil
}

// fillImport copies the mount's tree into the new workspace, and keeps it
// as the baseline for Changes as it passes. Both ends are the supervisor,
// never the engine's archive API: in the helper, its tar reads the tree as
// the sandbox user, so a file that user may not read is left out and
// listed (its bytes reach neither the workspace nor the baseline); in the
// workspace, its untar writes as that user, links as links (one leaving
// the tree too, which the engine's extraction refuses), nothing outside
// /workspace.
func (m *Manager) fillImport(ctx context.Context, w *record.Workspace, im *importer) (*Origin, error) {
	tree, tw := io.Pipe()
	var tarErr capped
	tarErr.max = 1 << 20
	tarDone := make(chan error, 1)
	go func() {
		code, err := m.rt.Exec(ctx, im.helper, sandbox.ExecOptions{
			Cmd: []string{supervisorPath, proto.TarCommand, importMountPoint}, Stdout: tw, Stderr: &tarErr})
		if err == nil && code != 0 {
			err = fmt.Errorf("tar exited %d", code)
		}
		tw.CloseWithError(err)
		tarDone <- err
	}()
	pr, pw := io.Pipe()
	type built struct {
		p   *baseline.Pending
		err error
	}
	done := make(chan built, 1)
	go func() {
		p, err := m.Baselines.Build(tree, im.imp.Name, m.quota(), &baseline.TarCopy{W: pw, UID: 1000, GID: 1000})
		pw.CloseWithError(err)
		tree.CloseWithError(errors.New("baseline ended"))
		done <- built{p, err}
	}()
	var out, errb capped
	out.max, errb.max = 1<<16, 4096
	code, err := m.Exec(ctx, w.Name, sandbox.ExecOptions{
		Cmd: []string{supervisorPath, proto.UntarCommand, Root}, Stdin: pr, Stdout: &out, Stderr: &errb})
	pr.CloseWithError(errors.New("copy ended"))
	b := <-done
	terr := <-tarDone
	if b.p != nil {
		defer b.p.Discard() // a no-op once committed
	}
	var tres proto.TarResult
	_ = json.Unmarshal(lastLine(tarErr.buf.Bytes()), &tres)
	var ures proto.UntarResult
	if err == nil && (json.Unmarshal(out.buf.Bytes(), &ures) != nil || code != 0 || ures.Error != "") {
		err = fmt.Errorf("untar exited %d: %s %s (an image built before this server lacks it: run `sandboxer images build`)",
			code, ures.Error, strings.TrimSpace(errb.buf.String()))
	}
	switch {
	case errors.Is(b.err, baseline.ErrTooLarge):
		return nil, fmt.Errorf("import: mount %q grew past the quota while it was copied (policy workspaces.disk_mb=%d): nothing was kept", im.imp.Name, m.pol.Workspaces.DiskMB)
	case terr != nil:
		return nil, fmt.Errorf("import %q: reading the tree: %v %s", im.imp.Name, terr, tres.Error)
	case err != nil:
		return nil, fmt.Errorf("import into %q: %w", w.Name, err)
	case b.err != nil:
		return nil, fmt.Errorf("import %q: %w", im.imp.Name, b.err)
	}
	im.origin.Bytes = b.p.Manifest.Bytes
	im.origin.addSkipped(tres.Skipped, tres.SkippedCount)
	return im.origin, b.p.Commit(w.ID)
}

// addSkipped adds what the copy left out beyond what the scan listed (a
// file that changed in between).
func (o *Origin) addSkipped(more []proto.SpecialFile, count int) {
	seen := map[string]bool{}
	for _, f := range o.Skipped {
		seen[f.Path] = true
	}
	for _, f := range more {
		if !seen[f.Path] {
			o.SkippedCount++
			if len(o.Skipped) < proto.MaxScanSpecial {
				o.Skipped = append(o.Skipped, f)
			}
		}
	}
	if count > o.SkippedCount {
		o.SkippedCount = count
	}
}

// lastLine is b's last non-empty line.
func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// fillFork copies workspace src's files (caches and user installs
// included; not its running jobs) into w, and gives w src's baseline.
func (m *Manager) fillFork(ctx context.Context, w, src *record.Workspace) (*Origin, error) {
	tree, err := m.Files(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("fork %q: %w", src.Name, err)
	}
	defer tree.Close()
	counted := &quotaReader{r: tree, left: m.quota() + 64<<20} // tar headers on top of the files
	if err := m.rt.CopyTo(ctx, w.ContainerID, Root, counted); err != nil {
		if counted.over {
			return nil, fmt.Errorf("from: workspace %q holds more than a workspace may (policy workspaces.disk_mb=%d): delete files there first", src.Name, m.pol.Workspaces.DiskMB)
		}
		return nil, fmt.Errorf("fork %q: %w", src.Name, err)
	}
	if m.Baselines != nil {
		if err := m.Baselines.Copy(src.ID, w.ID); err != nil {
			return nil, fmt.Errorf("fork %q: its baseline: %w", src.Name, err)
		}
	}
	return &Origin{From: src.Name, Bytes: counted.read}, nil
}

// quotaReader fails a stream that goes past left bytes.
type quotaReader struct {
	r          io.Reader
	left, read int64
	over       bool
}

func (q *quotaReader) Read(p []byte) (int, error) {
	n, err := q.r.Read(p)
	q.read += int64(n)
	if q.left -= int64(n); q.left < 0 {
		q.over = true
		return n, errors.New("past the workspace's disk quota")
	}
	return n, err
}

// ChangeSummary is one changed path.
type ChangeSummary struct {
	Path   string `json:"path"`
	Change string `json:"change"` // added, modified, deleted
	Type   string `json:"type"`   // file, symlink, dir
	Binary bool   `json:"binary,omitempty"`
	// NotInDiff: the path is listed but the patch leaves it out (Note says why).
	NotInDiff bool   `json:"not_in_diff,omitempty"`
	Note      string `json:"note,omitempty"`
}

// Changes is what a workspace changed since its baseline.
type Changes struct {
	// Baseline names what is compared against: "import of <mount>", or
	// "empty" for a workspace that was not imported.
	Baseline string
	Changes  []ChangeSummary
	Diff     string
}

// excludedFromChanges are the caches the server keeps on the volume
// (CacheEnv), relative to /workspace: never part of the project.
func excludedFromChanges() []string {
	var out []string
	for _, kv := range CacheEnv {
		_, v, _ := strings.Cut(kv, "=")
		if rel, ok := strings.CutPrefix(v, Root+"/"); ok {
			out = append(out, rel)
		}
	}
	return out
}

// Changes compares a workspace's files with its baseline, inside its
// container (no link is followed there), and writes the patch here.
func (m *Manager) Changes(ctx context.Context, name string) (*Changes, error) {
	w, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	var base *baseline.Manifest
	if m.Baselines != nil {
		if base, err = m.Baselines.Load(w.ID); err != nil {
			return nil, err
		}
	}
	req := proto.ChangesRequest{Exclude: excludedFromChanges(), MaxFileBytes: changesMaxFile, MaxTotalBytes: changesMaxTotal}
	res := &Changes{Baseline: "empty"}
	if base != nil {
		req.Baseline, res.Baseline = base.Entries, "import of "+base.Source
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, changesTimeout)
	defer cancel()
	var out, errb capped
	out.max, errb.max = changesMaxOutput, 4096
	code, err := m.Exec(ctx, name, sandbox.ExecOptions{
		Cmd: []string{supervisorPath, proto.ChangesCommand}, Stdin: bytes.NewReader(body), Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		return nil, err
	}
	var got proto.ChangesResult
	if jerr := json.Unmarshal(out.buf.Bytes(), &got); jerr != nil {
		return nil, fmt.Errorf("the changes helper in workspace %q failed (exit %d): %s (an image built before workspace_changes lacks it: run `sandboxer images build`, then create the workspace again)",
			name, code, strings.TrimSpace(errb.buf.String()))
	}
	if got.Error != "" {
		return nil, fmt.Errorf("workspace %q: %s", name, got.Error)
	}
	blob := func(sum string) ([]byte, error) { return m.Baselines.Blob(w.ID, sum) }
	var baseEntries []proto.BaselineEntry
	if base != nil {
		baseEntries = base.Entries
	}
	if res.Changes, res.Diff, err = writeChanges(got.Changes, baseEntries, blob); err != nil {
		return nil, fmt.Errorf("workspace %q: %w", name, err)
	}
	return res, nil
}

// writeChanges sums up the changes the helper found against the baseline's
// entries (whose file contents blob gives) and writes them as one patch:
// deletions first, so that a path a deletion frees can be made again, then
// the rest by path. A file whose content is not at hand on either side (over
// changesMaxFile, past the helper's budget, unreadable) is listed, marked
// not_in_diff, and left out of the patch, so the rest still applies.
func writeChanges(found []proto.Change, base []proto.BaselineEntry, blob func(sum string) ([]byte, error)) ([]ChangeSummary, string, error) {
	sort.SliceStable(found, func(i, j int) bool {
		di, dj := found[i].Change == "deleted", found[j].Change == "deleted"
		if di != dj {
			return di
		}
		return found[i].Path < found[j].Path
	})
	old := make(map[string]proto.BaselineEntry, len(base))
	for _, e := range base {
		old[e.Path] = e
	}
	var sums []ChangeSummary
	var diff strings.Builder
	for _, c := range found {
		sum := ChangeSummary{Path: c.Path, Change: c.Change, Type: c.Type, Note: c.Note}
		f, why, err := patchFile(c, old[c.Path], blob)
		if err != nil {
			return nil, "", err
		}
		sum.Binary = f.Binary
		switch {
		case c.Type == "dir":
			// an unreadable directory: named, not diffed
		case why != "":
			sum.NotInDiff = true
			sum.Note = strings.TrimPrefix(sum.Note+"; not in the diff: "+why, "; ")
		default:
			if err := patch.Write(&diff, f); err != nil {
				return nil, "", err
			}
		}
		sums = append(sums, sum)
	}
	return sums, diff.String(), nil
}

// patchFile pairs a change with its baseline side; why says why it cannot
// be part of the patch, when it cannot.
func patchFile(c proto.Change, old proto.BaselineEntry, blob func(sum string) ([]byte, error)) (f patch.File, why string, err error) {
	f = patch.File{Path: c.Path}
	if c.Change != "added" && old.Path != "" {
		f.Old = patch.Side{Exists: true, Symlink: old.Type == "symlink", Executable: old.Mode&0o100 != 0}
		switch old.Type {
		case "symlink":
			f.Old.Content = []byte(old.Target)
		case "file":
			if old.Size > changesMaxFile {
				why = fmt.Sprintf("its baseline is over %d MiB", changesMaxFile>>20)
				break
			}
			b, err := blob(old.SHA256)
			if err != nil {
				return f, "", fmt.Errorf("its baseline lacks %s: %w", old.Path, err)
			}
			f.Old.Content = b
			f.Binary = isBinary(b)
		}
	}
	if c.Change != "deleted" {
		f.New = patch.Side{Exists: true, Symlink: c.Type == "symlink", Executable: c.Mode&0o100 != 0}
		switch {
		case c.Type == "symlink":
			f.New.Content = []byte(c.Target)
		case c.Omitted:
			why = fmt.Sprintf("its content was not read (over %d MiB, past %d MiB in all, or unreadable): copy it from the workspace", changesMaxFile>>20, changesMaxTotal>>20)
		default:
			f.New.Content = c.Content
			f.Binary = f.Binary || c.Binary || isBinary(c.Content)
		}
	}
	return f, why, nil
}

// isBinary is git's test: a NUL byte in the first 8,000 bytes.
func isBinary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 }
