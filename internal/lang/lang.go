// Package lang is the one registry of languages: for each, the image it
// runs in, how its version is reported, how run_script stores, compiles and
// runs a source, which manager installs run_script's dependencies, which
// install_packages' auto means in a workspace, and which program
// start_session runs. Images come from images/ (tagged by content hash)
// unless the operator's policy maps a language to another image. script,
// deps, workspace and the tools read it; none keeps a list of its own.
package lang

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Language is one language's record.
type Language struct {
	Name string
	// Base is the built-in language a template runs as (Resolve sets it;
	// a built-in language's is its own name).
	Base string
	// Runtime is a template's OCI runtime (Resolve sets it); "" = the
	// policy's runtime.
	Runtime     string
	ImageName   string // folder under images/
	Description string
	// VersionCmd prints the runtime's version inside its image.
	VersionCmd string
	// Script is how run_script runs a source of the language.
	Script Script
	// Dependencies is the manager of run_script's dependencies (pip, npm,
	// go, cargo); "" = its scripts take none.
	Dependencies string
	// Packages is the manager install_packages' auto means in a workspace
	// of the language (apt, pip, npm, go, cargo).
	Packages string
	// Session is the interactive program start_session runs: argv in pty
	// and in pipe mode. Empty: bash.
	Session Session
	// Figures: the image captures what a job plots (proto.FiguresEnv;
	// images/python/sandboxer_figures.py), and it comes back as images.
	Figures bool
}

// Script says how a language's source is stored, compiled and run
// (internal/script writes the driver from it).
type Script struct {
	File    string // file name of the source in script.ScriptDir
	Compile string // shell command run in script.ScriptDir; "" = interpreted
	Run     string // shell command that execs the program; "$@" are the args
	// Main, when set, is a program of the image that does what the driver
	// does (reads the source from stdin, writes it under script.ScriptDir,
	// runs it with the args) in the language's own runtime: a fresh sandbox
	// with no setup step runs Main + args instead of the driver, and a warm
	// sandbox may start Main before its job (sandbox.Prestart).
	Main []string
	// EarlyEnv names the variables Main's runtime reads when it starts
	// (sandbox.Prestart.EarlyEnv): a job that sets them runs in a new process.
	EarlyEnv []string
	// LateEnv are variables matching EarlyEnv that Main reads again once it
	// has its job (sandbox.Prestart.LateEnv).
	LateEnv []string
	// MainDeps says Main also does the dependency setup (what deps.Setup
	// does for the driver) when script.DepsDirEnv names the mounted cache.
	MainDeps bool
}

// Compiled says whether the language has a compile step.
func (s Script) Compiled() bool { return s.Compile != "" }

// Prestart is what a warm sandbox may start ahead of a job that runs Main;
// nil when the language has no Main.
func (s Script) Prestart() *sandbox.Prestart {
	if s.Main == nil {
		return nil
	}
	return &sandbox.Prestart{Argv: s.Main, EarlyEnv: s.EarlyEnv, LateEnv: s.LateEnv}
}

// Session is an interactive program: argv on a terminal and on pipes.
type Session struct{ PTY, Pipe []string }

// DefaultLanguage is used when a request names none.
const DefaultLanguage = "bash"

// NodeMain is the javascript image's runner of a script (images/javascript/script-main.js).
const NodeMain = "/usr/local/lib/sandboxer/script-main.js"

// nodeEarlyEnv: what node, V8, libuv, OpenSSL, ICU and the C library read
// when node starts, rather than when a script asks.
var nodeEarlyEnv = []string{"NODE_*", "UV_*", "LD_*", "GLIBC_TUNABLES", "MALLOC_*", "OPENSSL_*", "SSL_CERT_*",
	"TZ", "LANG", "LANGUAGE", "LC_*", "ICU_*"}

// pythonVersion prints Python's version and those of the data packages the
// image ships (images/python), when importable.
const pythonVersion = `python3 -c 'import sys, importlib
v = ["Python " + sys.version.split()[0]]
for m, n in (("numpy", "numpy"), ("pandas", "pandas"), ("matplotlib", "matplotlib"), ("PIL", "Pillow")):
    try: v.append(n + " " + importlib.import_module(m).__version__)
    except ImportError: pass
print(", ".join(v))'`

var (
	python = Session{PTY: []string{"python3"}, Pipe: []string{"python3", "-i", "-u"}}
	node   = Session{PTY: []string{"node"}, Pipe: []string{"node", "-i"}}
)

// builtins, in the order lists show them.
var builtins = []Language{
	{Name: "bash", ImageName: "base", Description: "bash with coreutils and procps", VersionCmd: "bash --version | head -n1",
		Script:   Script{File: "main.sh", Run: `exec bash "$D/main.sh" "$@"`},
		Packages: "apt"},
	{Name: "python", ImageName: "python", Description: "Debian's python3 with venv, pip, numpy, pandas, matplotlib and Pillow", VersionCmd: pythonVersion,
		Script:       Script{File: "main.py", Run: `exec python3 "$D/main.py" "$@"`},
		Dependencies: "pip", Packages: "pip", Session: python, Figures: true},
	{Name: "javascript", ImageName: "javascript", Description: "Node.js and npm from the npm registry", VersionCmd: "echo \"node $(node --version)\"",
		// Node decides CommonJS or ES module from the syntax. The runner
		// re-reads NODE_PATH (Module._initPaths) once it has its job.
		Script: Script{File: "main.js", Run: `exec node "$D/main.js" "$@"`,
			Main: []string{"node", NodeMain}, EarlyEnv: nodeEarlyEnv, LateEnv: []string{"NODE_PATH"}, MainDeps: true},
		Dependencies: "npm", Packages: "npm", Session: node},
	{Name: "typescript", ImageName: "javascript", Description: "TypeScript on Node.js: run_script transpiles with esbuild (tsx's); tsc and tsx are installed", VersionCmd: "echo \"esbuild $(esbuild --version), node $(node --version), tsc $(tsc --version | sed 's/^Version //')\"",
		// esbuild (tsx's transpiler) strips the types; syntax errors are
		// compile errors; require() still works in the ES module it emits.
		Script: Script{File: "main.ts",
			Compile: `esbuild main.ts --log-level=warning --platform=node --format=esm --target=esnext --outfile=main.mjs '--banner:js=import { createRequire as __sbxCreateRequire } from "node:module"; const require = __sbxCreateRequire(import.meta.url);'`,
			Run:     `exec node "$D/main.mjs" "$@"`},
		Dependencies: "npm", Packages: "npm", Session: node},
	{Name: "go", ImageName: "go", Description: "the Go toolchain from the Go module proxy", VersionCmd: "go version",
		Script: Script{File: "main.go",
			Compile: `{ [ -f go.mod ] || go mod init script 2>/dev/null; } && go build -trimpath -o main .`,
			Run:     `exec "$D/main" "$@"`},
		Dependencies: "go", Packages: "go"},
	{Name: "rust", ImageName: "rust", Description: "Debian's rustc and cargo", VersionCmd: "rustc --version",
		Script: Script{File: "main.rs",
			Compile: `rustc --edition 2021 -O --crate-name main -o main main.rs`,
			Run:     `exec "$D/main" "$@"`},
		Dependencies: "cargo", Packages: "cargo"},
	{Name: "solidity", ImageName: "solidity", Description: "solc (npm, WebAssembly) and an in-memory EVM (@ethereumjs/evm) on Node.js", VersionCmd: "solidity-run version",
		Script: Script{File: "main.sol",
			Compile: `solidity-run compile main.sol out.json`,
			Run:     `exec solidity-run run "$D/out.json" "$@"`},
		Packages: "npm"},
}

// Builtin returns the record of language name, whatever the policy maps
// its image to.
func Builtin(name string) (Language, bool) {
	for _, l := range builtins {
		if l.Name == name {
			return l, true
		}
	}
	return Language{}, false
}

// ScriptNames lists the languages run_script runs, in declared order.
func ScriptNames() []string {
	var names []string
	for _, l := range builtins {
		if l.Script.File != "" {
			names = append(names, l.Name)
		}
	}
	return names
}

// DependencyNames lists the languages whose scripts take dependencies, in
// declared order.
func DependencyNames() []string {
	var names []string
	for _, l := range builtins {
		if l.Dependencies != "" {
			names = append(names, l.Name)
		}
	}
	return names
}

// Registry resolves languages under the operator's image overrides, and
// the templates that share their names.
type Registry struct {
	images    func(language string) (image string, ok bool)
	templates Templates
}

// NewRegistry makes the registry: images gives an operator's image for a
// language (the policy's languages.<name>.image; nil: none), templates are
// the team's (nil: none). Both are given here, never set later.
func NewRegistry(images func(language string) (string, bool), templates Templates) *Registry {
	return &Registry{images: images, templates: templates}
}

// Templates are the images a team defines (internal/template): a job
// names one where it names a language, and it runs as its language does.
type Templates interface {
	// Names lists the policy's templates, sorted.
	Names() []string
	// TemplateLanguage is a policy template's built-in language.
	TemplateLanguage(name string) (string, bool)
	// ResolveImage finds the template name ctx's tenant sees (the policy's,
	// built now if missing, or its own snapshot): its built-in language,
	// image and runtime. ok false: no template has the name.
	ResolveImage(ctx context.Context, name string, progress func(string)) (t TemplateImage, ok bool, err error)
}

// TemplateImage is a template as a job runs it.
type TemplateImage struct {
	Language string // the built-in language it follows
	Image    string
	// Runtime is the OCI runtime its sandboxes run on (the policy's
	// templates.<name>.runtime or snapshots.runtime, else its runtime).
	Runtime string
}

// TemplateNames lists the policy's templates, sorted.
func (r *Registry) TemplateNames() []string {
	if r == nil || r.templates == nil {
		return nil
	}
	return r.templates.Names()
}

// TemplateLanguage is a policy template's built-in language.
func (r *Registry) TemplateLanguage(name string) (string, bool) {
	if r == nil || r.templates == nil {
		return "", false
	}
	return r.templates.TemplateLanguage(name)
}

// UnknownError is a name that is neither a language nor a template.
type UnknownError struct {
	Name  string
	Names []string
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("unknown language %q: use one of %s (list_languages tells more)", e.Name, strings.Join(e.Names, ", "))
}

// Resolve returns the language or template called name and its image: a
// template runs as its built-in language does, under its own name.
// progress hears a template's build when it is built for this use.
func (r *Registry) Resolve(ctx context.Context, name string, progress func(string)) (Language, string, error) {
	if l, img, ok := r.Lookup(name); ok {
		l.Base = l.Name
		return l, img, nil
	}
	unknown := &UnknownError{Name: name, Names: r.Names()}
	if len(unknown.Name) > 64 {
		unknown.Name = unknown.Name[:64] + "..."
	}
	if r.templates == nil {
		return Language{}, "", unknown
	}
	t, ok, err := r.templates.ResolveImage(ctx, name, progress)
	if !ok {
		return Language{}, "", unknown
	}
	if err != nil {
		return Language{}, "", err
	}
	l, ok := Builtin(t.Language)
	if !ok {
		return Language{}, "", fmt.Errorf("template %s follows %q, which is not a language", name, t.Language)
	}
	l.Name, l.Base, l.Description, l.Runtime = name, t.Language, "template on "+t.Language, t.Runtime
	return l, t.Image, nil
}

// Lookup returns a language and the image reference it runs in.
func (r *Registry) Lookup(name string) (Language, string, bool) {
	l, ok := Builtin(name)
	if !ok {
		return Language{}, "", false
	}
	if r.images == nil {
		return l, images.Tag(l.ImageName), true
	}
	if img, ok := r.images(name); ok {
		return l, img, true
	}
	return l, images.Tag(l.ImageName), true
}

// Names lists the known language names and the policy's templates, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(builtins))
	for _, l := range builtins {
		names = append(names, l.Name)
	}
	names = append(names, r.TemplateNames()...)
	sort.Strings(names)
	return names
}

// All lists the languages in their declared order.
func (r *Registry) All() []Language { return append([]Language(nil), builtins...) }
