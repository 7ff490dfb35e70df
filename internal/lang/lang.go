// Package lang maps a language name to the image it runs in and how its
// version is reported. Images come from images/ (tagged by content hash)
// unless the operator's policy maps a language to another image.
package lang

import (
	"sort"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/policy"
)

// Language is a named runtime.
type Language struct {
	Name        string
	ImageName   string // folder under images/
	Description string
	// VersionCmd prints the runtime's version inside its image.
	VersionCmd string
}

// DefaultLanguage is used when a request names none.
const DefaultLanguage = "bash"

var builtins = []Language{
	{Name: "bash", ImageName: "base", Description: "bash with coreutils and procps", VersionCmd: "bash --version | head -n1"},
	{Name: "python", ImageName: "python", Description: "Debian's python3 with venv and pip", VersionCmd: "python3 --version"},
	{Name: "javascript", ImageName: "javascript", Description: "Node.js and npm from the npm registry", VersionCmd: "echo \"node $(node --version)\""},
	{Name: "typescript", ImageName: "javascript", Description: "TypeScript on Node.js: run_script transpiles with esbuild (tsx's); tsc and tsx are installed", VersionCmd: "echo \"esbuild $(esbuild --version), node $(node --version), tsc $(tsc --version | sed 's/^Version //')\""},
	{Name: "go", ImageName: "go", Description: "the Go toolchain from the Go module proxy", VersionCmd: "go version"},
	{Name: "rust", ImageName: "rust", Description: "Debian's rustc and cargo", VersionCmd: "rustc --version"},
	{Name: "solidity", ImageName: "solidity", Description: "solc (npm, WebAssembly) and an in-memory EVM (@ethereumjs/evm) on Node.js", VersionCmd: "solidity-run version"},
}

// Registry resolves languages under a policy.
type Registry struct{ pol *policy.Policy }

func NewRegistry(pol *policy.Policy) *Registry { return &Registry{pol: pol} }

// Lookup returns a language and the image reference it runs in.
func (r *Registry) Lookup(name string) (Language, string, bool) {
	for _, l := range builtins {
		if l.Name == name {
			if img, ok := r.pol.Image(name); ok {
				return l, img, true
			}
			return l, images.Tag(l.ImageName), true
		}
	}
	return Language{}, "", false
}

// Names lists the known language names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(builtins))
	for _, l := range builtins {
		names = append(names, l.Name)
	}
	sort.Strings(names)
	return names
}

// All lists the languages in their declared order.
func (r *Registry) All() []Language { return append([]Language(nil), builtins...) }
