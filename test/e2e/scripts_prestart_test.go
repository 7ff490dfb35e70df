package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/lang"
)

// waitPrestarted waits until a warm sandbox of this server waits with a
// prestarted program (the pool following javascript's use).
func (s *server) waitPrestarted() { s.t.Helper(); s.waitPrestartedWith("") }

// waitPrestartedWith waits until a warm sandbox of this server waits with a
// prestarted program that runs already, with a volume whose name starts with mount mounted
// ("": with or without), that is not one of the containers used.
func (s *server) waitPrestartedWith(mount string, used ...string) []string {
	s.t.Helper()
	cfg := config.Config{StateDir: s.stateDir}
	inst := cfg.Instance()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := exec.Command("docker", "ps", "--no-trunc", "--filter", "label=dev.sandboxer.instance="+inst,
			"--filter", "label=dev.sandboxer.kind=pool", "--filter", "status=running", "--format", "{{.ID}}\t{{.Names}}\t{{.Mounts}}\t{{.Command}}").Output()
		if err != nil {
			s.t.Fatalf("docker ps: %v", err)
		}
		// The pool may keep several of a shape (its depth follows arrivals)
		// and a job takes any: wait until every one runs its program already
		// (else a job submitted now could see it start later, and the test
		// could not tell).
		var ready []string
		starting := false
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Split(l, "\t")
			if len(f) != 4 || !strings.Contains(f[3], " prestart ") || strings.HasPrefix(f[1], "sandboxer-job-") || !strings.Contains(f[2], mount) {
				continue
			}
			id := f[0]
			if slices.Contains(used, id) {
				continue
			}
			// The prestarted node itself, not the supervisor's argument naming it.
			if top, err := exec.Command("docker", "top", id, "-o", "pid,args").Output(); err == nil &&
				slices.ContainsFunc(strings.Split(string(top), "\n"), func(p string) bool { return strings.HasSuffix(strings.TrimSpace(p), " node "+lang.NodeMain) }) {
				ready = append(ready, id)
			} else {
				starting = true
			}
		}
		if len(ready) > 0 && !starting {
			return ready
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no warm javascript sandbox with a prestarted node after 2 minutes:\n%s\nstderr:\n%s", out, tail(s.stderr.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A javascript script served by a warm sandbox runs in the node process the
// sandbox started ahead, and behaves as `node main.js` would.
func TestScriptJavascriptPrestarted(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	// The first javascript script starts cold; the pool then follows its use.
	if r := s.ok("run_script", map[string]any{"language": "javascript", "code": "console.log('cold')"}); str(r, "stdout") != "cold\n" {
		t.Fatalf("first script: %v", r)
	}
	run := func(args map[string]any) map[string]any {
		t.Helper()
		s.waitPrestarted()
		args["language"] = "javascript"
		if args["timeout_s"] == nil {
			args["timeout_s"] = 60
		}
		args["wait_s"] = 50
		return s.ok("run_script", args)
	}

	t.Run("argv env stdin cwd", func(t *testing.T) {
		r := run(map[string]any{
			"code": `const chunks = [];
process.stdin.on('data', c => chunks.push(c)).on('end', () => console.log(JSON.stringify({
  argv: process.argv.slice(1), foo: process.env.FOO, internal: Object.keys(process.env).filter(k => k.startsWith('SANDBOXER_')),
  stdin: Buffer.concat(chunks).toString(), cwd: process.cwd(), main: require.main === module, origin: performance.timeOrigin })));`,
			"args": []string{"one arg", "two"}, "env": map[string]any{"FOO": "bar baz"}, "stdin": "in put\nline 2\n",
		})
		var got struct {
			Argv     []string
			Foo      string
			Internal []string
			Stdin    string
			Cwd      string
			Main     bool
			Origin   float64
		}
		if str(r, "status") != "completed" || json.Unmarshal([]byte(str(r, "stdout")), &got) != nil {
			t.Fatalf("want completed with a JSON line, got %v", r)
		}
		if strings.Join(got.Argv, "|") != "/tmp/sandboxer-script/main.js|one arg|two" || got.Foo != "bar baz" || len(got.Internal) != 0 ||
			got.Stdin != "in put\nline 2\n" || got.Cwd != "/workspace" || !got.Main {
			t.Errorf("the script saw %+v", got)
		}
		// Its node started before the job was submitted: it was prestarted.
		j := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
		created, err := time.Parse(time.RFC3339Nano, str(j, "created_at"))
		if err != nil {
			t.Fatal(err)
		}
		if origin := time.UnixMicro(int64(got.Origin * 1000)); !origin.Before(created) {
			t.Errorf("node started at %v, after the job was submitted (%v): not a prestarted node", origin, created)
		}
	})

	t.Run("exit code", func(t *testing.T) {
		r := run(map[string]any{"code": "console.log('before'); process.exit(3); console.log('after')"})
		if str(r, "status") != "failed" || num(t, r, "exit_code") != 3 || str(r, "stdout") != "before\n" {
			t.Errorf("process.exit(3): %v", r)
		}
	})

	t.Run("uncaught exception", func(t *testing.T) {
		r := run(map[string]any{"code": "console.log('x');\nthrow new Error('boom')"})
		if str(r, "status") != "failed" || num(t, r, "exit_code") != 1 || !strings.Contains(str(r, "stderr"), "Error: boom") ||
			!strings.Contains(str(r, "stderr"), "/tmp/sandboxer-script/main.js:2") {
			t.Errorf("throw: %v", r)
		}
	})

	t.Run("ES module", func(t *testing.T) {
		r := run(map[string]any{"code": "import os from 'node:os';\nconst t = await Promise.resolve(typeof os.cpus);\nconsole.log(t, typeof require, import.meta.filename);"})
		if str(r, "status") != "completed" || str(r, "stdout") != "function undefined /tmp/sandboxer-script/main.js\n" {
			t.Errorf("ES module: %v", r)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		r := run(map[string]any{"code": "console.log('started'); setInterval(() => {}, 1000);", "timeout_s": 2})
		if str(r, "status") != "timed_out" || str(r, "stdout") != "started\n" {
			t.Errorf("a script past its timeout: %v", r)
		}
	})

	// A job that sets what node reads at start-up runs in a new node.
	t.Run("early env", func(t *testing.T) {
		r := run(map[string]any{"code": "console.log(process.env.NODE_OPTIONS, typeof gc)", "env": map[string]any{"NODE_OPTIONS": "--expose-gc"}})
		if str(r, "status") != "completed" || str(r, "stdout") != "--expose-gc function\n" {
			t.Errorf("NODE_OPTIONS=--expose-gc: %v", r)
		}
	})
}

// A javascript script with dependencies served by a warm sandbox (the one
// the pool keeps with the dependency cache mounted) runs in the node process
// the sandbox started ahead, and finds its packages as a cold run does:
// require through NODE_PATH, import through node_modules beside the source,
// the cache read-only.
func TestScriptJavascriptDependenciesPrestarted(t *testing.T) {
	t.Parallel()
	s := startServer(t, depsPolicy(t, ""))
	t.Cleanup(func() { s.call("prune_dependency_caches", map[string]any{}) })
	dep := []string{"is-number@7.0.0"}
	first, _ := timedRun(s, map[string]any{"language": "javascript", "code": "console.log(require('is-number')(5))", "dependencies": dep})
	if str(first, "status") != "completed" || str(first, "stdout") != "true\n" {
		t.Fatalf("first run: %v", first)
	}
	// Containers that served a job keep their pool labels and command while
	// they end: the warm sandbox to wait for is none of those.
	firstJob := s.ok("get_job", map[string]any{"job_id": str(first, "job_id")})
	used := []string{str(firstJob, "container_id")}
	run := func(code string) (map[string]any, float64) {
		t.Helper()
		warm := s.waitPrestartedWith("sandboxer-deps-javascript-", used...)
		r, _ := timedRun(s, map[string]any{"language": "javascript", "code": code, "dependencies": dep})
		if cache, _ := depsOf(t, r); cache != "hit" {
			t.Fatalf("dependencies %v, want a hit", r["dependencies"])
		}
		j := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
		used = append(used, str(j, "container_id"))
		if !slices.Contains(warm, str(j, "container_id")) {
			t.Fatalf("served by %s, not by a warm sandbox with the cache mounted (%v)", str(j, "container_id"), warm)
		}
		created, err := time.Parse(time.RFC3339Nano, str(j, "created_at"))
		if err != nil {
			t.Fatal(err)
		}
		return r, float64(created.UnixMicro()) / 1000
	}

	t.Run("require", func(t *testing.T) {
		r, created := run(`const isNumber = require('is-number');
let ro = 'writable';
try { require('fs').writeFileSync('/deps/x', 'x'); } catch (e) { ro = e.code; }
console.log(JSON.stringify({ got: [isNumber(5), isNumber('x')], nodePath: process.env.NODE_PATH, ro,
  internal: Object.keys(process.env).filter(k => k.startsWith('SANDBOXER_')), origin: performance.timeOrigin,
  resolved: require.resolve('is-number') }));`)
		var got struct {
			Got      []bool
			NodePath string
			Ro       string
			Internal []string
			Origin   float64
			Resolved string
		}
		if str(r, "status") != "completed" || json.Unmarshal([]byte(str(r, "stdout")), &got) != nil {
			t.Fatalf("want completed with a JSON line, got %v", r)
		}
		if len(got.Got) != 2 || !got.Got[0] || got.Got[1] || got.NodePath != "/deps/node_modules" || got.Ro != "EROFS" ||
			len(got.Internal) != 0 || !strings.HasPrefix(got.Resolved, "/") {
			t.Errorf("the script saw %+v", got)
		}
		if got.Origin >= created {
			t.Errorf("node started at %.1f, after the job was submitted (%.1f): not a prestarted node", got.Origin, created)
		}
	})

	t.Run("ES module import", func(t *testing.T) {
		r, created := run("import isNumber from 'is-number';\nconsole.log(isNumber(7), typeof require, performance.timeOrigin);")
		f := strings.Fields(str(r, "stdout"))
		if str(r, "status") != "completed" || len(f) != 3 || f[0] != "true" || f[1] != "undefined" {
			t.Fatalf("ES module import: %v", r)
		}
		if origin, err := strconv.ParseFloat(f[2], 64); err != nil || origin >= created {
			t.Errorf("node started at %s, after the job was submitted (%.1f): not a prestarted node", f[2], created)
		}
	})
	// The runner's own dependency setup, on a cache the test makes: an
	// incomplete cache is refused as the driver refused it; a complete one's
	// packages are found by require and by import.
	t.Run("runner setup", func(t *testing.T) {
		dir := t.TempDir()
		pkg := filepath.Join(dir, "node_modules", "sbx-demo")
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"package.json": `{"name":"sbx-demo","main":"index.js"}`, "index.js": "module.exports = 42;\n"} {
			if err := os.WriteFile(filepath.Join(pkg, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range []string{dir, filepath.Join(dir, "node_modules"), pkg} {
			_ = os.Chmod(d, 0o755)
		}
		runner := func(code string) (string, string, int) {
			t.Helper()
			cmd := exec.Command("docker", "run", "--rm", "-i", "--network", "none", "-v", dir+":/deps:ro",
				"-e", fmt.Sprintf("SANDBOXER_SOURCE_BYTES=%d", len(code)), "-e", "SANDBOXER_DEPS_DIR=/deps", "-e", "NODE_PATH=/deps/node_modules",
				str(firstJob, "image"), "node", lang.NodeMain)
			cmd.Stdin = strings.NewReader(code)
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code2 := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code2 = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("docker run: %v", err)
			}
			return out.String(), errb.String(), code2
		}
		if _, stderr, code := runner("console.log(require('sbx-demo'))"); code != 125 || !strings.Contains(stderr, "sandboxer: the dependency cache is incomplete") {
			t.Errorf("an incomplete cache: exit %d, stderr %q", code, stderr)
		}
		if err := os.WriteFile(filepath.Join(dir, ".sandboxer-complete"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, stderr, code := runner("console.log(require('sbx-demo'))"); code != 0 || out != "42\n" {
			t.Errorf("require: exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		if out, stderr, code := runner("import v from 'sbx-demo';\nconsole.log(v, process.env.SANDBOXER_DEPS_DIR)"); code != 0 || out != "42 undefined\n" {
			t.Errorf("import: exit %d, stdout %q, stderr %q", code, out, stderr)
		}
	})
}
