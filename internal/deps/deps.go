// Package deps installs run_script's dependencies into cached engine volumes.
//
// A dependency list, in the language's own notation, is checked against the
// package manager's grammar, normalised (sorted, deduplicated) and keyed with
// the language and image. Each key has one engine volume (labelled LabelKey:
// a Docker volume, a PersistentVolumeClaim on Kubernetes), filled once by an
// install sandbox (the language image, network bridge, the volume
// read-write; on a runtime whose sandboxes have no network, a filler sandbox
// through the tunnel: sandbox.TunnelVolumeFiller) and then mounted read-only
// at Dir into every script sandbox that asks for the same list; scripts
// themselves keep network none.
package deps

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/sandboxer/sandboxer/internal/lang"
)

// Labels of a dependency cache volume.
const (
	LabelKey      = "dev.sandboxer.deps"          // the cache key
	LabelLanguage = "dev.sandboxer.deps-language" // the language
	LabelImage    = "dev.sandboxer.deps-image"    // the image installed with
	LabelList     = "dev.sandboxer.deps-list"     // the normalised list, space-separated
)

// Dir is where a script sandbox sees its dependencies (read-only).
const Dir = "/deps"

// installDir is where the install sandbox fills the volume: the image's
// /workspace (owned by the sandbox user), so the fresh volume takes its owner.
const installDir = "/workspace"

// Bounds of a list.
const (
	MaxEntries    = 64
	MaxEntryBytes = lang.MaxRequirementBytes
)

// PrebuildEnv bounds, in seconds, the build of a Go install's packages.
const PrebuildEnv = "SANDBOXER_PREBUILD_S"

// CAEnv carries the install's extra CA bundle (PEM) into the install sandbox.
const CAEnv = "SANDBOXER_INSTALL_CA"

// goCacheSeed is the go image's prebuilt standard-library build cache
// (script.GoCacheSeed), read by the image's GOCACHEPROG.
const goCacheSeed = "/usr/local/share/go-build-seed"

// completeMarker is written last by a successful install.
const completeMarker = ".sandboxer-complete"

// Dependency managers (a language's lang.Language.Dependencies): their
// grammar is lang's, the same as install_packages'.
const (
	managerPip   = lang.ManagerPip
	managerNpm   = lang.ManagerNpm
	managerGo    = lang.ManagerGo
	managerCargo = lang.ManagerCargo
)

// managerOf is the manager of a language's dependencies ("" = none), from
// the language registry.
func managerOf(language string) string {
	l, _ := lang.Builtin(language)
	return l.Dependencies
}

// Normalise checks a list against the language's grammar and returns it
// sorted and deduplicated. Errors name dependencies and the bad entry.
func Normalise(language string, list []string) ([]string, error) {
	m, ok := lang.PackageManager(managerOf(language))
	if !ok {
		return nil, fmt.Errorf("dependencies: %s scripts take none (only %s do)", language, listing(lang.DependencyNames()))
	}
	if len(list) > MaxEntries {
		return nil, fmt.Errorf("dependencies has %d entries; the limit is %d", len(list), MaxEntries)
	}
	out := make([]string, 0, len(list))
	for i, d := range list {
		if err := m.Check(d); err != nil {
			return nil, fmt.Errorf("dependencies[%d] %v", i, err)
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Key is the cache key of a normalised list for a language and image.
func Key(language, image string, list []string) string {
	h := sha256.Sum256([]byte(language + "\x00" + image + "\x00" + strings.Join(list, "\x00")))
	return hex.EncodeToString(h[:])[:20]
}

// VolumeName is a new volume name for a cache key (unique: volume names are
// the engine's, shared by every server instance).
func VolumeName(language, key string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return "sandboxer-deps-" + language + "-" + key[:12] + "-" + hex.EncodeToString(r[:])
}

const caSetup = `if [ -n "${` + CAEnv + `:-}" ]; then
  cat /etc/ssl/certs/ca-certificates.crt > /tmp/ca.pem 2>/dev/null || :
  printf '%s\n' "$` + CAEnv + `" >> /tmp/ca.pem
  export NODE_EXTRA_CA_CERTS=/tmp/ca.pem SSL_CERT_FILE=/tmp/ca.pem PIP_CERT=/tmp/ca.pem GIT_SSL_CAINFO=/tmp/ca.pem npm_config_cafile=/tmp/ca.pem
fi
unset ` + CAEnv + `
`

// InstallScript is the bash script an install sandbox runs, with the list as
// its arguments ("$@"), always after "--"; pipIndex is the policy's index.
func InstallScript(language, pipIndex string) (string, error) {
	var b strings.Builder
	b.WriteString("set -e\nD=" + installDir + "\ncd /tmp\n" + caSetup)
	switch managerOf(language) {
	case managerNpm:
		// No lifecycle scripts: nothing of a package runs with network.
		b.WriteString(`npm install --prefix "$D" --no-save --no-package-lock --ignore-scripts --no-fund --no-audit --loglevel=warn -- "$@"` + "\n")
	case managerPip:
		idx := ""
		if pipIndex != "" {
			u, err := url.Parse(pipIndex)
			if err != nil || u.Host == "" {
				return "", fmt.Errorf("scripts.pip_index_url %q is not a URL", pipIndex)
			}
			idx = " --index-url " + shq(pipIndex)
			if u.Scheme == "http" {
				idx += " --trusted-host " + shq(u.Hostname())
			}
		}
		b.WriteString(`export PIP_BREAK_SYSTEM_PACKAGES=1
pip install --no-cache-dir --no-input --disable-pip-version-check --target "$D"` + idx + ` -- "$@"` + "\n")
	case managerGo:
		b.WriteString(`export GOMODCACHE="$D/gomod" GOFLAGS=-modcacherw GOPROXY=https://proxy.golang.org GOSUMDB=off GOPATH=/tmp/go GOTOOLCHAIN=local
mkdir -p /tmp/mod "$GOMODCACHE" && cd /tmp/mod
printf 'module script\n\ngo 1.21\n' > go.mod
go get -- "$@"
cp go.mod "$D/go.mod"; if [ -f go.sum ]; then cp go.sum "$D/go.sum"; else : > "$D/go.sum"; fi
# Build the modules' packages once (as run_script builds: -trimpath, so the
# cache does not depend on where the modules sit): scripts start from it.
export GOCACHE="$D/gocache" GOFLAGS="-modcacherw -mod=mod"
for m in "$@"; do
  go list -e -f '{{if and (not .Error) (not .DepsErrors)}}{{.ImportPath}}{{end}}' "${m%@*}/..." 2>/dev/null
done | sort -u > /tmp/pkgs
# Best effort, within a third of the install's deadline: what was built by then stays.
if [ -s /tmp/pkgs ]; then timeout "${SANDBOXER_PREBUILD_S:-100}" xargs go build -trimpath -o /dev/null < /tmp/pkgs >/dev/null 2>&1 || :; fi
go clean -testcache 2>/dev/null || :
`)
	case managerCargo:
		return "", fmt.Errorf("dependencies: rust crates cannot be installed on this host (crates.io is not reachable from this host); run rust scripts without dependencies")
	default:
		return "", fmt.Errorf("dependencies: %s scripts take none", language)
	}
	b.WriteString(`touch "$D/` + completeMarker + `"
echo "sandboxer-deps-size-kb=$(du -sk "$D" | cut -f1)"
`)
	return b.String(), nil
}

// RunEnv is the environment a script sandbox gets to find its dependencies.
func RunEnv(language string) []string {
	switch managerOf(language) {
	case managerPip:
		return []string{"PYTHONPATH=" + Dir}
	case managerNpm:
		return []string{"NODE_PATH=" + Dir + "/node_modules"}
	case managerGo:
		// The modules' prebuilt packages are a read-only seed beside the image's.
		return []string{"GOMODCACHE=" + Dir + "/gomod", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off",
			"SANDBOXER_GOCACHE_SEEDS=" + goCacheSeed + ":" + Dir + "/gocache"}
	}
	return nil
}

// Setup is the shell step a script's driver runs in its source directory
// before compiling (see script.Driver).
func Setup(language string) string {
	check := `[ -f ` + Dir + `/` + completeMarker + ` ] || { echo "sandboxer: the dependency cache is incomplete: prune it (prune_dependency_caches) and run again" >&2; exit 1; }`
	switch managerOf(language) {
	case managerNpm:
		// ES modules ignore NODE_PATH: they find node_modules next to the source.
		return check + ` && ln -s ` + Dir + `/node_modules node_modules`
	case managerGo:
		// The build cache of the modules' packages is a seed (see Env).
		return check + ` && cp ` + Dir + `/go.mod ` + Dir + `/go.sum . && chmod u+w go.mod go.sum`
	}
	return check
}

// listing joins names as "a, b and c".
func listing(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// shq quotes s for bash.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
