package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
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

// sharedModule is a module whose tests and toolexec script, if the shared
// cache's builder ever ran them, would plant files in the cache.
var sharedModule = map[string]string{
	"go.mod":  "module example.com/shared\n\ngo 1.22\n",
	"a/a.go":  "package a\n\nfunc Double(x int) int { return 2 * x }\n",
	"b/b.go":  "package b\n\nimport \"example.com/shared/a\"\n\nfunc Quad(x int) int { return a.Double(a.Double(x)) }\n",
	"evil.sh": "#!/bin/sh\necho toolexec > /go-build-shared/current/planted-toolexec\nexec \"$@\"\n",
	"a/a_test.go": "package a\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\n" +
		"func init() { os.WriteFile(\"/go-build-shared/current/planted-init\", []byte(\"x\"), 0o644) }\n\n" +
		"func TestDouble(t *testing.T) {\n\tos.WriteFile(\"/go-build-shared/current/planted-test\", []byte(\"x\"), 0o644)\n\tif Double(2) != 4 {\n\t\tt.Fatal(\"Double(2)\")\n\t}\n}\n",
	"b/b_test.go": "package b\n\nimport \"testing\"\n\nfunc TestQuad(t *testing.T) {\n\tif Quad(1) != 4 {\n\t\tt.Fatal(\"Quad(1)\")\n\t}\n}\n",
}

// sharedUnpack unpacks sharedModule from stdin; sharedProbe then tests it
// and counts what it compiled and vetted.
const (
	sharedUnpack = `mkdir -p /tmp/s && cd /tmp/s && base64 -d | tar xzf - && chmod +x evil.sh && `
	sharedProbe  = sharedUnpack + `go test -count=1 -x ./... 2>/tmp/x.log; echo "compiled=$(grep -c -- '/compile -o' /tmp/x.log) vetted=$(grep -c -- '/vet ' /tmp/x.log)"; ls /go-build-shared/current/ | grep planted; true`
)

// THREATS (docs/threats.md) 103: fresh go sandboxes share a build cache that
// only a trusted builder writes. After a job's go test, the builder compiles
// the module again (never running it), and the next fresh sandbox compiles
// nothing of it. A job cannot write the cache; the builder runs neither the
// module's tests nor its init functions nor a -toolexec a job records.
func TestFreshGoBuildsShareATrustedCache(t *testing.T) {
	t.Parallel()
	sharedGoBuildCache(t, startServer(t))
}

func sharedGoBuildCache(t *testing.T, s *server) {
	stdin := tarball(t, sharedModule)
	unpack := sharedUnpack
	r := s.ok("run_command", map[string]any{"language": "go", "timeout_s": 300, "stdin": stdin, "command": unpack +
		`go test -count=1 ./... && { touch /go-build-shared/current/x /go-build-shared/x 2>/dev/null && echo WROTE-SHARED || echo read-only; } && ` +
		// A forged record: a -toolexec the builder must never run.
		`printf '{"dir":"/tmp/s/a","args":["test","-toolexec","/tmp/s/evil.sh","./..."]}\n' >> "$SANDBOXER_GO_BUILDS"`})
	if out := str(r, "stdout"); str(r, "status") != "completed" || !strings.Contains(out, "ok  \texample.com/shared/a") || !strings.Contains(out, "read-only") {
		t.Fatalf("the first go test: %v", r)
	}
	// The builder runs after the job: a later fresh sandbox finds the
	// module's packages, its test variants and its vet results built.
	probe := sharedProbe
	deadline := time.Now().Add(3 * time.Minute)
	var out string
	for {
		r = s.ok("run_command", map[string]any{"language": "go", "timeout_s": 300, "stdin": stdin, "command": probe})
		out = str(r, "stdout")
		if str(r, "status") != "completed" || !strings.Contains(out, "ok  \texample.com/shared/b") {
			t.Fatalf("go test in a later fresh sandbox: %v", r)
		}
		if strings.Contains(out, "compiled=0 vetted=0") || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if !strings.Contains(out, "compiled=0 vetted=0") {
		t.Fatalf("a fresh sandbox still compiles the module after its first run (is the shared cache filled?): %q", out)
	}
	if strings.Contains(out, "planted") {
		t.Fatalf("the builder ran code of the module: %q", out)
	}
	// A change is compiled anew (keys are the sources'), and the rest is not.
	r = s.ok("run_command", map[string]any{"language": "go", "timeout_s": 300, "stdin": stdin, "command": unpack +
		`sed -i 's/2 \* x/x + x/' a/a.go && go test -count=1 -x ./... 2>/tmp/x.log; grep -- '/compile -o' /tmp/x.log | grep -o -- '-p [^ ]*' | sort | uniq -c | wc -l`})
	if str(r, "status") != "completed" || !strings.Contains(str(r, "stdout"), "ok  \texample.com/shared/a") || strings.HasSuffix(str(r, "stdout"), "\n0\n") {
		t.Fatalf("a changed module in a fresh sandbox: %v", r)
	}
}

// tarball is files as a gzipped tar, base64-encoded (a job's stdin).
func tarball(t *testing.T, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[name]))
	}
	tw.Close()
	zw.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}
