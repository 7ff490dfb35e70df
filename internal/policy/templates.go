package policy

import (
	"github.com/sandboxer/sandboxer/internal/lang"

	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Template is an image the operator defines from a Dockerfile
// (internal/template builds it). Jobs name it where they name a language.
type Template struct {
	// Dockerfile is an absolute path; "" = <context>/Dockerfile. It is
	// sent as the context's Dockerfile, whatever its name.
	Dockerfile string `yaml:"dockerfile"`
	// Context is the absolute directory sent to the builder.
	Context string `yaml:"context"`
	// BuildArgs are the build's ARG values.
	BuildArgs map[string]string `yaml:"build_args"`
	// Language is the built-in language whose run_script, installs and
	// sessions the template follows; "" = bash.
	Language string `yaml:"language"`
	// Network is the build's network: "none" (default), "egress" (the
	// allowlist proxy) or "bridge" (only with templates_build.allow_bridge).
	Network string `yaml:"network"`
	// Runtime is the OCI runtime its jobs and workspaces run on; "" = the
	// policy's runtime.
	Runtime string `yaml:"runtime"`
}

// Snapshots are the settings of the images snapshot_workspace makes.
type Snapshots struct {
	// Runtime is the OCI runtime of jobs and workspaces started from a
	// snapshot (an image made of a tenant's files, e.g. "runsc"); "" = the
	// policy's runtime.
	Runtime string `yaml:"runtime"`
}

// RuntimeKey is a runtime the policy names and the key that names it.
type RuntimeKey struct{ Key, Runtime string }

// Runtimes are every runtime the policy names, with its key: runtime,
// templates.<name>.runtime and snapshots.runtime, those set only.
func (p *Policy) Runtimes() []RuntimeKey {
	var out []RuntimeKey
	if p.Runtime != "" {
		out = append(out, RuntimeKey{"runtime", p.Runtime})
	}
	for _, name := range slices.Sorted(maps.Keys(p.Templates)) {
		if rt := p.Templates[name].Runtime; rt != "" {
			out = append(out, RuntimeKey{"templates." + name + ".runtime", rt})
		}
	}
	if p.Snapshots.Runtime != "" {
		out = append(out, RuntimeKey{"snapshots.runtime", p.Snapshots.Runtime})
	}
	return out
}

// namesRuntime: some key of the policy names runtime rt.
func (p *Policy) namesRuntime(rt string) bool {
	return slices.ContainsFunc(p.Runtimes(), func(k RuntimeKey) bool { return k.Runtime == rt })
}

// TemplateRuntime is the runtime of a template's sandboxes: a policy
// template's own (snapshot false), or snapshots.runtime, else the policy's.
func (p *Policy) TemplateRuntime(name string, snapshot bool) string {
	rt := p.Templates[name].Runtime
	if snapshot {
		rt = p.Snapshots.Runtime
	}
	if rt == "" {
		return p.Runtime
	}
	return rt
}

// TemplateBuilds are the caps of every template build and the templates'
// disk budget.
type TemplateBuilds struct {
	// MaxContextMB caps a build context (its files, before anything is sent).
	MaxContextMB int64 `yaml:"max_context_mb"`
	// MaxBuildS caps one build's time.
	MaxBuildS int64 `yaml:"max_build_s"`
	// MaxImageMB caps a built image's size: a larger one is removed and refused.
	MaxImageMB int64 `yaml:"max_image_mb"`
	// DiskMB is what all templates' images may take together; past it the
	// least recently used one not in use is removed.
	DiskMB int64 `yaml:"disk_mb"`
	// AllowBridge lets a template build on the engine's bridge network
	// (full network access during the build).
	AllowBridge bool `yaml:"allow_bridge"`
}

// TemplateNamePattern is a template's name: a language's grammar.
var TemplateNamePattern = LanguageNamePattern

var buildArgPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// validateTemplates checks templates and templates_build.
func (p *Policy) validateTemplates(ps *problems) {
	b := p.TemplateBuilds
	ps.intIn("templates_build.max_context_mb", b.MaxContextMB, 1, maxMB)
	ps.intIn("templates_build.max_build_s", b.MaxBuildS, 10, maxSeconds)
	ps.intIn("templates_build.max_image_mb", b.MaxImageMB, 16, 1<<20)
	ps.intIn("templates_build.disk_mb", b.DiskMB, 16, 1<<22)
	if rt := p.Snapshots.Runtime; rt != "" && !runtimePattern.MatchString(rt) {
		ps.add("snapshots.runtime", "invalid OCI runtime name %q (want letters, digits, '.', '_', '-'; or empty for the policy's runtime)", rt)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Templates)) {
		t := p.Templates[name]
		key := "templates." + name
		if !TemplateNamePattern.MatchString(name) {
			ps.add(key, "invalid template name %q (want %s)", name, TemplateNamePattern)
			continue
		}
		if _, builtin := lang.Builtin(name); builtin { // templates share the languages' names
			ps.add(key, "%q is a built-in language: templates share the languages' names, so pick another", name)
		}
		if !cleanAbs(t.Context) {
			ps.add(key+".context", "must be a clean absolute directory, got %q", t.Context)
		}
		if t.Dockerfile != "" && !cleanAbs(t.Dockerfile) {
			ps.add(key+".dockerfile", "must be a clean absolute path of a Dockerfile (or empty for <context>/Dockerfile), got %q", t.Dockerfile)
		}
		if _, builtin := lang.Builtin(t.Language); t.Language != "" && !builtin {
			ps.add(key+".language", "%q is not a built-in language", t.Language)
		}
		switch t.Network {
		case "", NetworkNone:
		case NetworkEgress:
			if len(p.Egress.Allow) == 0 {
				ps.add(key+".network", "egress needs hosts in egress.allow")
			}
		case NetworkBridge:
			if !b.AllowBridge {
				ps.add(key+".network", "bridge gives the build the whole network: set templates_build.allow_bridge: true to allow it, or use egress")
			}
		default:
			ps.add(key+".network", "must be %q, %q or %q, got %q", NetworkNone, NetworkEgress, NetworkBridge, t.Network)
		}
		if t.Runtime != "" && !runtimePattern.MatchString(t.Runtime) {
			ps.add(key+".runtime", "invalid OCI runtime name %q (want letters, digits, '.', '_', '-'; or empty for the policy's runtime)", t.Runtime)
		}
		for _, k := range slices.Sorted(maps.Keys(t.BuildArgs)) {
			if !buildArgPattern.MatchString(k) {
				ps.add(key+".build_args", "%q is not a build argument name (letters, digits, _)", k)
			}
			if strings.ContainsAny(t.BuildArgs[k], "\x00") {
				ps.add(key+".build_args."+k, "holds a NUL byte")
			}
		}
	}
}

func cleanAbs(p string) bool {
	return p != "" && filepath.IsAbs(p) && filepath.Clean(p) == p && p != "/" && !strings.ContainsAny(p, "\x00\n")
}

// TemplateLanguage is the built-in language a template follows.
func (t Template) TemplateLanguage() string {
	if t.Language == "" {
		return "bash"
	}
	return t.Language
}

// TemplateNetwork is a template build's network.
func (t Template) TemplateNetwork() string {
	if t.Network == "" {
		return NetworkNone
	}
	return t.Network
}

// DockerfilePath is where a template's Dockerfile is read.
func (t Template) DockerfilePath() string {
	if t.Dockerfile == "" {
		return filepath.Join(t.Context, "Dockerfile")
	}
	return t.Dockerfile
}
