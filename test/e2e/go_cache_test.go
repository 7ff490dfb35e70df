package e2e

import (
	"strings"
	"testing"
)

// goHello writes a small module in the job's /tmp that prints its argument.
const goHello = `mkdir -p /tmp/p && cd /tmp/p && printf 'module example.com/p\n\ngo 1.22\n' > go.mod && ` +
	`printf 'package main\n\nimport (\n\t"fmt"\n\t"os"\n\t"strings"\n)\n\nfunc main() { fmt.Println(strings.ToUpper(os.Args[1])) }\n' > main.go && `

// A fresh go sandbox's go build, with default flags, finds the standard
// library in the image's read-only seed: only the program is compiled.
func TestFreshGoBuildUsesTheSeed(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"language": "go", "timeout_s": 300,
		"command": goHello + `go build -x -o /tmp/hello . 2>/tmp/x.log && /tmp/hello ok && grep -c -- '-p main ' /tmp/x.log; grep -c -- '-p fmt ' /tmp/x.log; go env GOCACHEPROG`})
	out := str(r, "stdout")
	if str(r, "status") != "completed" || !strings.HasPrefix(out, "OK\n1\n0\n") || !strings.Contains(out, "sandboxer-supervisor gocacheprog") {
		t.Fatalf("go build in a fresh sandbox: %v", r)
	}
}

// THREATS (docs/threats.md) 52: a job poisons every cache it can write (its
// Go build cache, npm's, pip's) and tries the image's seed; the next fresh
// job builds the same program correctly and sees none of it.
func TestFreshJobsShareNoCache(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	poison := goHello + `go build -o /tmp/hello . && /tmp/hello first >/dev/null && ` +
		`if touch /usr/local/share/go-build-seed/x 2>/dev/null; then echo SEED-WRITABLE; fi; ` +
		`find "$GOCACHE" -name '*-d' -exec sh -c 'printf poison > "$1"' _ {} \; ; ` +
		`for d in "$GOCACHE" "${npm_config_cache:-$HOME/.npm}" "${PIP_CACHE_DIR:-$HOME/.cache/pip}" /tmp; do mkdir -p "$d" && echo poison > "$d/sbx-poison"; done; echo done`
	r := s.ok("run_command", map[string]any{"language": "go", "timeout_s": 300, "command": poison})
	if out := str(r, "stdout"); str(r, "status") != "completed" || strings.Contains(out, "SEED-WRITABLE") || !strings.Contains(out, "done") {
		t.Fatalf("the poisoning job: %v", r)
	}
	check := goHello + `go build -o /tmp/hello . && /tmp/hello second; ` +
		`for d in "$GOCACHE" "${npm_config_cache:-$HOME/.npm}" "${PIP_CACHE_DIR:-$HOME/.cache/pip}" /tmp; do if [ -e "$d/sbx-poison" ]; then echo "POISON in $d"; fi; done; ` +
		`grep -rl poison "$GOCACHE" 2>/dev/null | head -1`
	r = s.ok("run_command", map[string]any{"language": "go", "timeout_s": 300, "command": check})
	if out := str(r, "stdout"); str(r, "status") != "completed" || out != "SECOND\n" {
		t.Fatalf("the next fresh job read what the first wrote: %v", r)
	}
}

// A go workspace's jobs use a plain GOCACHE on its volume, with no
// GOCACHEPROG round trip per action: the daemon links the image's
// standard-library seed into it, so a first build compiles only the program.
// THREATS 97: a job cannot write through a link into the seed.
func TestWorkspaceGoCacheLinksTheSeed(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	name := "e2e-golinks"
	s.createWS(name, map[string]any{"language": "go"})
	out := s.longWSRun(name, goHello+`go build -x -o /tmp/hello . 2>/tmp/x.log && /tmp/hello ok && grep -c -- '-p main ' /tmp/x.log; grep -c -- '-p fmt ' /tmp/x.log; `+
		`echo "prog=[$(go env GOCACHEPROG)]"; l=$(find "$GOCACHE" -type l -name '*-d' | head -1); `+
		`if [ -z "$l" ]; then echo NO-LINKS; elif { printf poison >> "$l"; } 2>/dev/null; then echo WROTE-SEED; fi`)
	if out != "OK\n1\n0\nprog=[]\n" {
		t.Fatalf("go build in a workspace: %q", out)
	}
}
