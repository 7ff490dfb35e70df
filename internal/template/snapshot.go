package template

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// SnapshotRequest makes a template of a workspace.
type SnapshotRequest struct {
	Name      string
	Workspace *record.Workspace // the tenant's, checked by the caller
	// Files opens a tar of the workspace's /workspace ("dir/." form). It
	// is opened after the commit, never across it: Docker's commit pauses
	// the container, and a stream from it that nobody reads while the
	// commit waits (one over a pipe's buffer) held both forever.
	Files func(context.Context) (io.ReadCloser, error)
	// Env is what the snapshot's jobs need to find what installs put
	// under /workspace (the workspace package's CacheEnv).
	Env      []string
	Progress Progress
}

// skippedInSnapshot are caches under /workspace a snapshot leaves out:
// rebuilt on demand, and often most of a workspace's bytes.
var skippedInSnapshot = []string{".cache/pip", ".cache/npm", ".cache/go-build"}

// CheckName says what is wrong with a new template's name, if anything.
func (m *Manager) CheckName(name string) error {
	switch {
	case !policy.TemplateNamePattern.MatchString(name):
		return fmt.Errorf("%q is not a template name (want %s)", name, policy.TemplateNamePattern)
	case isBuiltin(name):
		return fmt.Errorf("%q is a built-in language: templates share the languages' names, so pick another", name)
	case m.IsTemplate(name):
		return fmt.Errorf("%q is a template of the policy: pick another name", name)
	}
	return nil
}

// Snapshot makes ctx's tenant's template name of a workspace: its
// container's root filesystem (what apt installed), and its files, which
// each fresh job and each new workspace from it starts with (proto.SeedDir).
// Processes and memory are not kept. A snapshot of the same name is replaced.
func (m *Manager) Snapshot(ctx context.Context, req SnapshotRequest) (*record.Template, error) {
	if m.eng == nil {
		return nil, ErrUnsupported
	}
	if err := m.CheckName(req.Name); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	progress := req.Progress
	if progress == nil {
		progress = func(string) {}
	}
	owner := tenant.Owner(ctx)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.pol.TemplateBuilds.MaxBuildS)*time.Second)
	defer cancel()
	w := req.Workspace
	base, err := m.eng.ImageInfo(ctx, w.Image)
	if err != nil {
		return nil, fmt.Errorf("snapshot: the workspace's image %s: %w", w.Image, err)
	}
	sum := sha256.Sum256([]byte(owner))
	repo := snapshotRepo + hex.EncodeToString(sum[:])[:8] + "-" + req.Name
	root := repo + "-root:" + fmt.Sprintf("%x", time.Now().UnixNano())
	cfg := base.Config
	cfg.Env = mergeEnv(cfg.Env, req.Env)
	cfg.User = "1000:1000"
	cfg.Labels = map[string]string{sandbox.LabelTemplate: req.Name}
	progress(fmt.Sprintf("committing workspace %s", w.Name))
	if err := m.eng.CommitWorkspace(ctx, w.ContainerID, root, cfg); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer func() { _ = m.eng.RemoveImage(context.WithoutCancel(ctx), root) }() // the tag only: the image is the core's parent
	rootInfo, err := m.eng.ImageInfo(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	progress("packing the workspace's files")
	max := m.pol.TemplateBuilds.MaxContextMB << 20
	tree, err := req.Files(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot: workspace %s's files: %w", w.Name, err)
	}
	files, n, err := seedContext(root, tree, max)
	tree.Close()
	if err != nil {
		return nil, fmt.Errorf("snapshot: workspace %s: %w", w.Name, err)
	}
	fsum := sha256.Sum256(files)
	h := sha256.New()
	fmt.Fprintf(h, "sandboxer-snapshot-v1\nroot %s\nfiles %x\nsupervisor %s\n", rootInfo.ID, fsum, images.SupervisorSum())
	key := hex.EncodeToString(h.Sum(nil))[:KeyLen]
	core := repo + "-core:" + key
	progress(fmt.Sprintf("building snapshot %s of %d MiB of files (key %s)", req.Name, ceilMiB(n), key))
	if err := m.eng.BuildImage(ctx, sandbox.ImageBuild{Tag: core, Context: files, Network: "none",
		Labels: map[string]string{sandbox.LabelTemplate: req.Name, sandbox.LabelTemplateKey: key}}, progress); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return m.finish(ctx, finishing{name: req.Name, owner: owner, core: core, final: repo + ":" + key, key: key,
		source: record.TemplateSnapshot, language: w.Language, workspace: w.Name, progress: progress})
}

// seedContext is the build context that puts a workspace's files (a tar
// of /workspace/.) at proto.SeedDir on root, owned by the sandbox user.
func seedContext(root string, files io.Reader, max int64) ([]byte, int64, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	df := "FROM " + root + "\nCOPY --chown=1000:1000 files/ " + proto.SeedDir + "/\n"
	if err := writeFile(tw, "Dockerfile", 0o644, []byte(df)); err != nil {
		return nil, 0, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "files/", Mode: 0o755, ModTime: fixedTime, Format: tar.FormatPAX}); err != nil {
		return nil, 0, err
	}
	tr := tar.NewReader(files)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		name := path.Clean(strings.TrimPrefix(strings.TrimPrefix(hdr.Name, "./"), "/"))
		if i := strings.IndexByte(name, '/'); i >= 0 && (name[:i] == "." || name[:i] == "workspace") {
			name = name[i+1:] // "workspace/x" when the engine names the folder
		}
		if name == "." || name == "workspace" || name == "" || strings.HasPrefix(name, "../") || skipped(name) {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		default:
			continue // devices, pipes: nothing a job's files need
		}
		if total += hdr.Size; total > max {
			return nil, 0, fmt.Errorf("its files are over templates_build.max_context_mb (%d MiB): delete some first", max>>20)
		}
		out := &tar.Header{Typeflag: hdr.Typeflag, Name: "files/" + name, Linkname: hdr.Linkname, Mode: hdr.Mode & 0o7777 &^ 0o6000,
			Size: hdr.Size, ModTime: hdr.ModTime, Format: tar.FormatPAX}
		if hdr.Typeflag == tar.TypeDir {
			out.Name += "/"
		}
		if err := tw.WriteHeader(out); err != nil {
			return nil, 0, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.CopyN(tw, tr, hdr.Size); err != nil {
				return nil, 0, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), total, nil
}

func skipped(name string) bool {
	for _, s := range skippedInSnapshot {
		if name == s || strings.HasPrefix(name, s+"/") {
			return true
		}
	}
	return false
}

// mergeEnv sets extra's variables over base's.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	set := map[string]bool{}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// isBuiltin says whether name is a built-in language's.
func isBuiltin(name string) bool {
	_, ok := lang.Builtin(name)
	return ok
}
