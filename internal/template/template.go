// Package template builds and keeps the images teams define: the policy's
// templates (a Dockerfile and its context) and the tenants' snapshots of a
// workspace. A template's image is its core (the Dockerfile's build, or a
// workspace's commit and files) plus the sandbox supervisor with the user
// set to 1000, so every hardening default of the built-in images holds; its
// tag is a cache key of every input, so an unchanged build is a lookup.
// Records live in the store (record.Template); images on the engine
// (sandbox.ImageBuilder). Templates' images share a disk budget, the least
// recently used going first, never one in use.
package template

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// KeyLen is the hex digits of a template's key (and of its image's tag).
const KeyLen = 12

// Repository prefixes of templates' images.
const (
	templateRepo = images.RepositoryPrefix + "template-"
	snapshotRepo = images.RepositoryPrefix + "snapshot-"
)

// ErrUnsupported: the engine builds no images (Kubernetes without a registry).
var ErrUnsupported = errors.New("templates: this engine builds no images; templates need backend docker or podman (docs/templates.md says what to do on Kubernetes)")

// Manager builds, finds and removes templates.
type Manager struct {
	pol *policy.Policy
	eng sandbox.ImageBuilder // nil: templates are refused
	st  *store.Store
	log zerolog.Logger
	// egress grants a build on network egress the proxy (its environment,
	// until revoke); nil when the proxy is not running.
	egress Egress

	mu       sync.Mutex
	flights  map[string]*flight      // builds under way, by template
	contexts map[string]contextMemo  // by template
	resolved map[string]resolvedMemo // by tenant and name
}

type flight struct {
	done chan struct{}
	rec  *record.Template
	err  error
}

// contextMemo remembers a context's digest for a signature of its files.
type contextMemo struct {
	sig, dockerfile, digest string
}

// Egress grants a build on network egress the proxy: its environment, until
// revoke (internal/egress's Runtime.Grant).
type Egress func(ctx context.Context, job string) (env []string, revoke func())

// New makes a manager; eng nil refuses every template (ErrUnsupported);
// egress nil refuses builds on network egress (no proxy runs).
func New(pol *policy.Policy, eng sandbox.ImageBuilder, st *store.Store, egress Egress, log zerolog.Logger) *Manager {
	return &Manager{pol: pol, eng: eng, st: st, egress: egress, log: log, flights: map[string]*flight{}, contexts: map[string]contextMemo{}, resolved: map[string]resolvedMemo{}}
}

// Supported says whether the engine builds templates.
func (m *Manager) Supported() bool { return m != nil && m.eng != nil }

// Progress receives a build's output, a line at a time.
type Progress func(line string)

// IsTemplate says whether name is one of the policy's templates.
func (m *Manager) IsTemplate(name string) bool {
	if m == nil {
		return false
	}
	_, ok := m.pol.Templates[name]
	return ok
}

// Names lists the policy's templates, sorted.
func (m *Manager) Names() []string {
	if m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(m.pol.Templates))
}

// keyed is a policy template's key, with its context when it was packed.
type keyed struct {
	key     string
	context *Packed // nil when the key came from the memo (unchanged context)
}

// Key computes a policy template's key: the Dockerfile, the context's
// files, the build args, the network, every FROM image's id and the
// supervisor. repack forces the context to be read (for a build).
func (m *Manager) key(ctx context.Context, name string, repack bool) (*keyed, error) {
	if m.eng == nil {
		return nil, ErrUnsupported
	}
	t, ok := m.pol.Templates[name]
	if !ok {
		return nil, fmt.Errorf("templates: %q is not a template of the policy (templates: %s)", name, strings.Join(m.Names(), ", "))
	}
	dockerfile, err := ReadDockerfile(t.DockerfilePath())
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	maxBytes := m.pol.TemplateBuilds.MaxContextMB << 20
	total, sig, err := Measure(t.Context)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	if total > maxBytes {
		return nil, fmt.Errorf("template %s: %w", name, &ContextTooLargeError{Dir: t.Context, Bytes: total, Max: maxBytes})
	}
	dfSum := sha256.Sum256(dockerfile)
	dfHex := hex.EncodeToString(dfSum[:])
	p := &keyed{}
	m.mu.Lock()
	memo, ok := m.contexts[name]
	m.mu.Unlock()
	digest := ""
	if ok && memo.sig == sig && memo.dockerfile == dfHex && !repack {
		digest = memo.digest
	} else {
		packed, err := pack(t.Context, dockerfile, maxBytes) // measured above
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		p.context, digest = packed, packed.Digest
		m.mu.Lock()
		m.contexts[name] = contextMemo{sig: sig, dockerfile: dfHex, digest: digest}
		m.mu.Unlock()
	}
	parents, err := images.FromImages(string(dockerfile), t.BuildArgs)
	if err != nil {
		return nil, fmt.Errorf("template %s: Dockerfile: %w", name, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "sandboxer-template-v1\ncontext %s\nnetwork %s\n", digest, t.TemplateNetwork())
	for _, k := range slices.Sorted(maps.Keys(t.BuildArgs)) {
		fmt.Fprintf(h, "arg %q=%q\n", k, t.BuildArgs[k])
	}
	for _, ref := range parents {
		info, err := m.eng.ImageInfo(ctx, ref)
		if errors.Is(err, sandbox.ErrImageNotFound) {
			return nil, fmt.Errorf("template %s: FROM %s: the image is not present on the engine (images are never pulled: `sandboxer images build` makes sandboxer/base:latest and the languages' images)", name, ref)
		}
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		fmt.Fprintf(h, "from %s %s\n", ref, info.ID)
	}
	if images.Supervisor() == nil {
		return nil, images.ErrNoSupervisor
	}
	fmt.Fprintf(h, "supervisor %s\n", images.SupervisorSum())
	p.key = hex.EncodeToString(h.Sum(nil))[:KeyLen]
	return p, nil
}

// ImageOf is a policy template's final image tag for key.
func ImageOf(name, key string) string { return templateRepo + name + ":" + key }

func coreOf(name, key string) string { return templateRepo + name + "-core:" + key }

// Key returns a policy template's current key (reading only what changed).
func (m *Manager) Key(ctx context.Context, name string) (string, error) {
	p, err := m.key(ctx, name, false)
	if err != nil {
		return "", err
	}
	return p.key, nil
}

// BuildOptions are a build's choices.
type BuildOptions struct {
	NoCache  bool // rebuild, the engine's layer cache off, even when the image exists
	Progress Progress
}

// Build makes a policy template's image unless one with its key exists;
// built says whether it built. Concurrent builds of one template share one.
func (m *Manager) Build(ctx context.Context, name string, o BuildOptions) (rec *record.Template, built bool, err error) {
	plan, err := m.key(ctx, name, false)
	if err != nil {
		return nil, false, err
	}
	tag := ImageOf(name, plan.key)
	if !o.NoCache {
		if rec, ok := m.present(ctx, "", name, tag, plan.key); ok {
			return rec, false, nil
		}
	}
	m.mu.Lock()
	if f, ok := m.flights[name]; ok {
		m.mu.Unlock()
		select {
		case <-f.done:
			return f.rec, true, f.err
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	m.flights[name] = f
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.flights, name)
		m.mu.Unlock()
		close(f.done)
	}()
	f.rec, f.err = m.build(ctx, name, o)
	return f.rec, true, f.err
}

// present returns the record of a template whose image with key exists.
func (m *Manager) present(ctx context.Context, owner, name, tag, key string) (*record.Template, bool) {
	info, err := m.eng.ImageInfo(ctx, tag)
	if err != nil {
		return nil, false
	}
	rec := &record.Template{Name: name, Tenant: owner, Source: record.TemplateDockerfile, Key: key, Image: tag, ImageID: info.ID, SizeBytes: info.Size, CreatedAt: info.Created, UsedAt: time.Now()}
	if t, ok := m.pol.Templates[name]; ok {
		rec.Language = t.TemplateLanguage()
	}
	if old, err := m.st.GetTemplate(tenant.With(ctx, tenant.Tenant{Admin: true}), name); err == nil && old.Tenant == owner && old.Key == key {
		rec = old
		rec.ImageID, rec.SizeBytes = info.ID, info.Size
	}
	return rec, true
}

func (m *Manager) build(ctx context.Context, name string, o BuildOptions) (*record.Template, error) {
	plan, err := m.key(ctx, name, true)
	if err != nil {
		return nil, err
	}
	t := m.pol.Templates[name]
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.pol.TemplateBuilds.MaxBuildS)*time.Second)
	defer cancel()
	args := map[string]string{}
	for k, v := range t.BuildArgs {
		args[k] = v
	}
	network := t.TemplateNetwork()
	if network == policy.NetworkEgress {
		if m.egress == nil {
			return nil, fmt.Errorf("template %s: network egress: the egress proxy is not running (policy key egress.allow is empty)", name)
		}
		env, revoke := m.egress(ctx, "template-"+name)
		defer revoke()
		for _, kv := range env { // the builder's predefined proxy args: never kept in the image
			k, v, _ := strings.Cut(kv, "=")
			args[k] = v
		}
		network = sandbox.NetworkEgress
	}
	core := coreOf(name, plan.key)
	progress(fmt.Sprintf("building template %s (key %s)", name, plan.key))
	start := time.Now()
	// No labels here: the builder would add a step for each, and the
	// steps a failure names are to be the Dockerfile's own.
	err = m.eng.BuildImage(ctx, sandbox.ImageBuild{Tag: core, Context: plan.context.Tar, BuildArgs: args, Network: network, NoCache: o.NoCache}, progress)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("template %s: the build ran past templates_build.max_build_s (%d s): %w", name, m.pol.TemplateBuilds.MaxBuildS, err)
		}
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	rec, err := m.finish(ctx, finishing{name: name, owner: "", core: core, final: ImageOf(name, plan.key), key: plan.key,
		source: record.TemplateDockerfile, language: t.TemplateLanguage(), progress: progress})
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("template %s built in %.1f s: %s (%d MiB)", name, time.Since(start).Seconds(), rec.Image, ceilMiB(rec.SizeBytes)))
	return rec, nil
}

// finishing is the last step of a template's image: the supervisor on its core.
type finishing struct {
	name, owner, core, final, key, source, language, workspace string
	progress                                                   Progress
}

// finalDockerfile adds the supervisor and sets the user, as every
// built-in image has them.
func finalDockerfile(core string) string {
	return "FROM " + core + "\nCOPY " + images.SupervisorFile + " " + images.SupervisorPath + "\nUSER 1000:1000\n"
}

func (m *Manager) finish(ctx context.Context, f finishing) (*record.Template, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := writeFile(tw, "Dockerfile", 0o644, []byte(finalDockerfile(f.core))); err != nil {
		return nil, err
	}
	if err := writeFile(tw, images.SupervisorFile, 0o755, images.Supervisor()); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	err := m.eng.BuildImage(ctx, sandbox.ImageBuild{Tag: f.final, Context: buf.Bytes(), Network: "none",
		Labels: map[string]string{sandbox.LabelTemplate: f.name, sandbox.LabelTemplateKey: f.key}}, f.progress)
	if err != nil {
		return nil, fmt.Errorf("template %s: adding the supervisor: %w", f.name, err)
	}
	info, err := m.eng.ImageInfo(ctx, f.final)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", f.name, err)
	}
	if max := m.pol.TemplateBuilds.MaxImageMB << 20; info.Size > max {
		_ = m.eng.RemoveImage(context.WithoutCancel(ctx), f.final)
		_ = m.eng.RemoveImage(context.WithoutCancel(ctx), f.core)
		return nil, fmt.Errorf("template %s: the image is %d MiB, over templates_build.max_image_mb (%d MiB): removed", f.name, ceilMiB(info.Size), max>>20)
	}
	now := time.Now()
	rec := &record.Template{Name: f.name, Tenant: f.owner, Source: f.source, Language: f.language, Key: f.key, Image: f.final,
		ImageID: info.ID, SizeBytes: info.Size, Workspace: f.workspace, CreatedAt: now, UsedAt: now}
	old, _ := m.st.GetTemplate(tenant.With(ctx, tenant.Tenant{Name: ownerName(f.owner)}), f.name)
	if err := m.st.PutTemplate(ctx, rec); err != nil {
		return nil, err
	}
	m.forget()
	if old != nil && old.Tenant == f.owner && old.Image != rec.Image { // its earlier build, unless a job still runs on it
		m.removeUnused(ctx, old)
	}
	m.Enforce(ctx, rec.Image)
	return rec, nil
}

// ownerName is the tenant a record's owner reads as ("" reads the policy's).
func ownerName(owner string) string {
	if owner == "" {
		return tenant.Local
	}
	return owner
}

// removeUnused removes a superseded build's images when no container uses them.
func (m *Manager) removeUnused(ctx context.Context, old *record.Template) {
	used, err := m.eng.ImagesInUse(ctx)
	if err != nil || used[old.ImageID] {
		return
	}
	if err := m.eng.RemoveImage(ctx, old.Image); err != nil {
		m.log.Warn().Err(err).Str("image", old.Image).Msg("remove a template's earlier build")
	}
	_ = m.eng.RemoveImage(ctx, coreTag(old))
}

// coreTag is the core image behind a record's final one.
func coreTag(r *record.Template) string {
	repo, key, _ := strings.Cut(r.Image, ":")
	return repo + "-core:" + key
}

// Resolve finds the template name that ctx's tenant sees (its snapshot,
// or the policy's template, built now when its image is missing or its
// inputs changed) and records the use. ok false: no template has the name.
func (m *Manager) Resolve(ctx context.Context, name string, progress Progress) (rec *record.Template, ok bool, err error) {
	if m == nil {
		return nil, false, nil
	}
	memoKey := tenant.Owner(ctx) + "\x00" + name
	m.mu.Lock()
	memo, fresh := m.resolved[memoKey]
	m.mu.Unlock()
	if fresh && time.Since(memo.at) < resolveFresh {
		return memo.rec, true, nil
	}
	rec, ok, err = m.resolve(ctx, name, progress)
	if ok && err == nil {
		m.mu.Lock()
		m.resolved[memoKey] = resolvedMemo{rec: rec, at: time.Now()}
		m.mu.Unlock()
	}
	return rec, ok, err
}

// resolveFresh is how long a resolved template is taken as it is: jobs
// that come back to back find it without a look at its context, the
// engine or the store (a changed context is seen this much later).
const resolveFresh = 2 * time.Second

type resolvedMemo struct {
	rec *record.Template
	at  time.Time
}

// forget drops every resolved template: a build, snapshot or removal changed them.
func (m *Manager) forget() {
	m.mu.Lock()
	clear(m.resolved)
	m.mu.Unlock()
}

func (m *Manager) resolve(ctx context.Context, name string, progress Progress) (*record.Template, bool, error) {
	if snap, err := m.st.GetTemplate(ctx, name); err == nil && snap.Source == record.TemplateSnapshot {
		if m.eng == nil {
			return nil, true, ErrUnsupported
		}
		if _, err := m.eng.ImageInfo(ctx, snap.Image); err != nil {
			return nil, true, fmt.Errorf("template %s: its image %s is gone from the engine: make the snapshot again", name, snap.Image)
		}
		_ = m.st.TouchTemplate(ctx, snap.Tenant, snap.Name)
		return snap, true, nil
	}
	if !m.IsTemplate(name) {
		return nil, false, nil
	}
	rec, built, err := m.Build(ctx, name, BuildOptions{Progress: progress})
	if err != nil {
		return nil, true, err
	}
	if !built { // a lookup: keep its record and its last use current
		rec.UsedAt = time.Now()
		_ = m.st.PutTemplate(ctx, rec)
	}
	return rec, true, nil
}

// Info is a template as list_languages and `templates list` show it.
type Info struct {
	Name, Language, Source, Workspace, Tenant string
	Key                                       string // current key ("" when it cannot be computed: Problem says why)
	Image                                     string // the built image ("" when not built with the current key)
	SizeBytes                                 int64
	UsedAt                                    time.Time
	Problem                                   string
}

// List describes the templates ctx's tenant sees: the policy's (their
// current keys, built or not) and its snapshots.
func (m *Manager) List(ctx context.Context) []Info {
	if m == nil {
		return nil
	}
	recs, _ := m.st.ListTemplates(ctx, false)
	byName := map[string]*record.Template{}
	var out []Info
	for _, r := range recs {
		if r.Source == record.TemplateSnapshot {
			out = append(out, Info{Name: r.Name, Language: r.Language, Source: r.Source, Workspace: r.Workspace, Tenant: r.Tenant,
				Key: r.Key, Image: r.Image, SizeBytes: r.SizeBytes, UsedAt: r.UsedAt})
			continue
		}
		byName[r.Name] = r
	}
	for _, name := range m.Names() {
		t := m.pol.Templates[name]
		in := Info{Name: name, Language: t.TemplateLanguage(), Source: record.TemplateDockerfile}
		if m.eng == nil {
			in.Problem = ErrUnsupported.Error()
			out = append(out, in)
			continue
		}
		key, err := m.Key(ctx, name)
		if err != nil {
			in.Problem = err.Error()
		}
		in.Key = key
		if r := byName[name]; r != nil {
			in.UsedAt = r.UsedAt
		}
		if key != "" {
			if info, err := m.eng.ImageInfo(ctx, ImageOf(name, key)); err == nil {
				in.Image, in.SizeBytes = ImageOf(name, key), info.Size
			}
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Remove removes a template's image and record: the policy's (name) for
// the operator, or ctx's tenant's snapshot. A template a container still
// uses is refused.
func (m *Manager) Remove(ctx context.Context, name string) error {
	if m.eng == nil {
		return ErrUnsupported
	}
	rec, err := m.st.GetTemplate(ctx, name)
	if err != nil {
		if m.IsTemplate(name) {
			return fmt.Errorf("template %s is not built", name)
		}
		return err
	}
	used, err := m.eng.ImagesInUse(ctx)
	if err != nil {
		return err
	}
	if used[rec.ImageID] {
		return fmt.Errorf("template %s is in use: a job, workspace or warm sandbox runs on %s; try again when it ends", name, rec.Image)
	}
	if err := m.remove(ctx, rec); err != nil {
		return err
	}
	return nil
}

// RemoveSnapshot removes ctx's tenant's snapshot name (the E2B API's deleteSnapshot):
// never the policy's templates, which are the operator's. One a container
// still uses is refused.
func (m *Manager) RemoveSnapshot(ctx context.Context, name string) error {
	if m.eng == nil {
		return ErrUnsupported
	}
	rec, err := m.st.GetTemplate(ctx, name)
	if err == nil && (rec.Source != record.TemplateSnapshot || rec.Tenant != tenant.Owner(ctx)) {
		if rec.Source != record.TemplateSnapshot {
			return fmt.Errorf("template %s is the policy's: the operator removes it (sandboxer templates rm)", name)
		}
		err = fmt.Errorf("%w: %s", record.ErrTemplateNotFound, name)
	}
	if err != nil {
		if m.IsTemplate(name) {
			return fmt.Errorf("template %s is the policy's: the operator removes it (sandboxer templates rm)", name)
		}
		return err
	}
	return m.Remove(ctx, name)
}

func (m *Manager) remove(ctx context.Context, rec *record.Template) error {
	if err := m.eng.RemoveImage(ctx, rec.Image); err != nil {
		return err
	}
	_ = m.eng.RemoveImage(ctx, coreTag(rec))
	if err := m.st.DeleteTemplate(ctx, rec.Tenant, rec.Name); err != nil {
		return err
	}
	m.forget()
	m.log.Info().Str("template", rec.Name).Str("tenant", rec.Tenant).Str("image", rec.Image).Msg("template removed")
	return nil
}

// Enforce keeps templates' images within templates_build.disk_mb: the
// least recently used go first, never one a container uses nor keep (the
// one just built). It returns what it removed.
func (m *Manager) Enforce(ctx context.Context, keep string) []string {
	recs, err := m.st.ListTemplates(ctx, true)
	if err != nil {
		return nil
	}
	var total int64
	for _, r := range recs {
		total += r.SizeBytes
	}
	budget := m.pol.TemplateBuilds.DiskMB << 20
	if total <= budget {
		return nil
	}
	used, err := m.eng.ImagesInUse(ctx)
	if err != nil {
		m.log.Warn().Err(err).Msg("templates' disk budget: which images are in use")
		return nil
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].UsedAt.Before(recs[j].UsedAt) })
	var removed []string
	for _, r := range recs {
		if total <= budget {
			break
		}
		if r.Image == keep || used[r.ImageID] {
			continue
		}
		if err := m.remove(ctx, r); err != nil {
			m.log.Warn().Err(err).Str("template", r.Name).Msg("templates' disk budget: remove")
			continue
		}
		total -= r.SizeBytes
		removed = append(removed, r.Name)
	}
	if total > budget {
		m.log.Warn().Int64("mib", ceilMiB(total)).Int64("budget_mib", budget>>20).Msg("templates are over their disk budget; the rest are in use")
	}
	return removed
}

// TemplateLanguage is a policy template's built-in language (lang.Templates).
func (m *Manager) TemplateLanguage(name string) (string, bool) {
	if m == nil {
		return "", false
	}
	t, ok := m.pol.Templates[name]
	return t.TemplateLanguage(), ok
}

// ResolveImage is Resolve as the language registry asks (lang.Templates).
func (m *Manager) ResolveImage(ctx context.Context, name string, progress func(string)) (lang.TemplateImage, bool, error) {
	rec, ok, err := m.Resolve(ctx, name, progress)
	if !ok || err != nil {
		return lang.TemplateImage{}, ok, err
	}
	return lang.TemplateImage{Language: rec.Language, Image: rec.Image,
		Runtime: m.pol.TemplateRuntime(rec.Name, rec.Source == record.TemplateSnapshot)}, true, nil
}
