package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/testutil"
)

// templateDir writes a template's build context: its Dockerfile and files.
func templateDir(t *testing.T, dockerfile string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// templatesCLI runs `sandboxer templates ARGS` on a state dir and policy.
func templatesCLI(t *testing.T, stateDir, policyPath string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"templates"}, args...)...)
	cmd.Env = append(os.Environ(), "SANDBOXER_STATE_DIR="+stateDir, "SANDBOXER_POLICY="+policyPath)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// removeTemplateImages removes a test's template images (unique names):
// their final, core and snapshot root tags, and their dangling layers.
func removeTemplateImages(t *testing.T, names ...string) {
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}").Output()
		for _, ref := range strings.Fields(string(out)) {
			repo, _, _ := strings.Cut(ref, ":")
			for _, n := range names {
				if strings.HasPrefix(repo, "sandboxer/") && (strings.HasSuffix(repo, "-"+n) || strings.Contains(repo, "-"+n+"-")) {
					_ = exec.Command("docker", "rmi", "-f", ref).Run()
				}
			}
		}
		for _, n := range names {
			_ = exec.Command("docker", "image", "prune", "-f", "--filter", "label=dev.sandboxer.template="+n).Run()
		}
	})
}

// TestTemplateFromADockerfile: a template built from a Dockerfile in a temp
// dir (FROM the local base image, a RUN that writes a file and installs a
// Debian package through the egress proxy) on first use, with progress
// notifications; its job sees the file and the program, runs as uid 1000
// with no capabilities on a read-only root, and starts with the files the
// template seeds; the second job of the template is warm.
func TestTemplateFromADockerfile(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("team%d", time.Now().UnixNano()%1_000_000)
	removeTemplateImages(t, name)
	dir := templateDir(t, `FROM sandboxer/base:latest
USER root
ARG NOTE=unset
COPY note.txt /opt/template/note.txt
RUN echo "$NOTE" > /opt/template/arg.txt \
 && apt-get update -o Acquire::Retries=2 \
 && apt-get install -y --no-install-recommends hello \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /usr/local/share/sandboxer/workspace \
 && echo seeded > /usr/local/share/sandboxer/workspace/start.txt
`, map[string]string{"note.txt": "from the context\n"})
	s := startServer(t, policyEnv(t, fmt.Sprintf(`
egress:
  allow: [deb.debian.org]
pool:
  size: {bash: 0, python: 0}
templates:
  %s:
    context: %s
    build_args: {NOTE: first}
    network: egress
`, name, dir)))
	req := toolRequest("run_command", map[string]any{"language": name, "wait_s": 45, "command": `
cat /opt/template/note.txt /opt/template/arg.txt start.txt; hello
echo "uid $(id -u)"; grep CapEff /proc/self/status
touch /opt/template/x 2>&1 | sed 's/.*: //'`})
	req.Params.Meta = &mcp.Meta{ProgressToken: "build"}
	res, err := s.client.CallTool(ctxTimeout(t, 5*time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("run_command on a template: %s\nstderr:\n%s", text(res), tail(s.stderr.String(), 3000))
	}
	first := structured(t, res)
	want := "from the context\nfirst\nseeded\nHello, world!\nuid 1000\nCapEff:\t0000000000000000\nRead-only file system\n"
	if str(first, "stdout") != want {
		t.Fatalf("stdout %q, want %q (stderr %q)", str(first, "stdout"), want, str(first, "stderr"))
	}
	s.notes.mu.Lock()
	steps := 0
	for _, n := range s.notes.progress {
		if strings.Contains(fmt.Sprint(n.Params.AdditionalFields["message"]), "Step ") {
			steps++
		}
	}
	s.notes.mu.Unlock()
	if steps == 0 {
		t.Errorf("no progress notification named a build step")
	}
	if langs := text(s.call("list_languages", map[string]any{})); !strings.Contains(langs, name) {
		t.Errorf("list_languages does not list the template:\n%s", langs)
	}
	if cmds := s.ok("list_commands", map[string]any{"language": name}); !strings.Contains(fmt.Sprint(cmds), "hello") {
		t.Errorf("list_commands on the template does not name hello: %v", cmds)
	}
	// The pool follows use: the template's next job is served warm.
	warm := s.waitWarm(1)
	second := s.ok("run_command", map[string]any{"language": name, "command": "hello"})
	if rec := s.ok("get_job", map[string]any{"job_id": str(second, "job_id")}); !servedWarm(warm, rec) {
		t.Errorf("the template's second job was not served warm: %v, warm %v", rec["container_id"], warm)
	}
	if str(second, "stdout") != "Hello, world!\n" {
		t.Errorf("second job: %v", second)
	}
}

// TestTemplateBuildFailures: a broken RUN step fails the call with that
// step, its exit code and its last lines; a context over the cap is refused
// before anything is sent; Dockerfile instructions that reach outside the
// context are refused.
func TestTemplateBuildFailures(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	removeTemplateImages(t, "broken"+sfx, "big"+sfx, "reach"+sfx)
	broken := templateDir(t, "FROM sandboxer/base:latest\nRUN echo preparing\nRUN for i in 1 2 3; do echo \"line $i\"; done; exit 3\nRUN echo never\n", nil)
	big := templateDir(t, "FROM sandboxer/base:latest\nCOPY blob /blob\n", map[string]string{"blob": strings.Repeat("x", 2<<20)})
	reach := templateDir(t, "FROM sandboxer/base:latest\nADD https://example.com/tool.tgz /opt/\n", nil)
	s := startServer(t, policyEnv(t, fmt.Sprintf(`
templates_build: {max_context_mb: 1}
templates:
  broken%[1]s: {context: %[2]s}
  big%[1]s: {context: %[3]s}
  reach%[1]s: {context: %[4]s}
`, sfx, broken, big, reach)))
	msg := s.toolErr("run_command", map[string]any{"language": "broken" + sfx, "command": "true"})
	for _, want := range []string{"Step 3/4 : RUN for i in 1 2 3", "exit code 3", "line 3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the broken build's error lacks %q:\n%s", want, msg)
		}
	}
	msg = s.toolErr("run_command", map[string]any{"language": "big" + sfx, "command": "true"})
	if !strings.Contains(msg, "over templates_build.max_context_mb (1 MiB): nothing was sent") {
		t.Errorf("a context over the cap: %s", msg)
	}
	msg = s.toolErr("run_command", map[string]any{"language": "reach" + sfx, "command": "true"})
	if !strings.Contains(msg, "ADD of https://example.com/tool.tgz is refused") {
		t.Errorf("ADD of a URL: %s", msg)
	}
	if strings.Contains(s.stderr.String(), "big"+sfx+"-core") {
		t.Errorf("the oversized context reached the builder")
	}
}

// TestTemplatesCLI: `templates build` builds once; unchanged it builds
// nothing (timed in the log); a changed build arg or context file
// rebuilds under a new key, which `templates list` states; --no-cache
// rebuilds; with a tiny disk budget the least recently used template goes,
// never one in use; `templates rm` refuses a template in use.
func TestTemplatesCLI(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	a, b := "alpha"+sfx, "beta"+sfx
	removeTemplateImages(t, a, b)
	ctxA := templateDir(t, "FROM sandboxer/base:latest\nUSER root\nARG V=0\nCOPY f.txt /opt/f.txt\nRUN echo \"$V\" > /opt/v\n", map[string]string{"f.txt": "one\n"})
	ctxB := templateDir(t, "FROM sandboxer/base:latest\nRUN echo b > /tmp/b\n", nil)
	state := t.TempDir()
	policy := func(v string, budgetMB int) string {
		return writePolicy(t, fmt.Sprintf("templates_build: {disk_mb: %d}\ntemplates:\n  %s: {context: %s, build_args: {V: %q}}\n  %s: {context: %s}\n",
			budgetMB, a, ctxA, v, b, ctxB))
	}
	p := policy("1", 100000)
	keyOf := func(out string) string {
		m := regexp.MustCompile(a + `\s+bash\s+dockerfile\s+([0-9a-f]{12})`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("templates list has no key for %s:\n%s", a, out)
		}
		return m[1]
	}
	build := func(policyPath string, args ...string) string {
		t.Helper()
		out, err := templatesCLI(t, state, policyPath, append([]string{"build"}, args...)...)
		if err != nil {
			t.Fatalf("templates build %v: %v\n%s", args, err, out)
		}
		return out
	}
	if out := build(p, a); !strings.Contains(out, " built in ") {
		t.Fatalf("first build: %s", out)
	}
	list, _ := templatesCLI(t, state, p, "list")
	k1 := keyOf(list)
	start := time.Now()
	if out := build(p, a); !strings.Contains(out, "up to date") {
		t.Fatalf("an unchanged build built: %s", out)
	}
	t.Logf("unchanged templates build: %v", time.Since(start))
	p2 := policy("2", 100000)
	if out := build(p2, a); !strings.Contains(out, " built in ") {
		t.Fatalf("a changed build arg did not rebuild: %s", out)
	}
	list, _ = templatesCLI(t, state, p2, "list")
	k2 := keyOf(list)
	if err := os.WriteFile(filepath.Join(ctxA, "f.txt"), []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := build(p2, a); !strings.Contains(out, " built in ") {
		t.Fatalf("a changed context file did not rebuild: %s", out)
	}
	list, _ = templatesCLI(t, state, p2, "list")
	k3 := keyOf(list)
	if k1 == k2 || k2 == k3 || k1 == k3 {
		t.Fatalf("keys did not change with their inputs: %s %s %s", k1, k2, k3)
	}
	if out := build(p2, "--no-cache", a); !strings.Contains(out, " built in ") {
		t.Fatalf("--no-cache did not rebuild: %s", out)
	}
	// A server runs a workspace on alpha: in use, it survives a tiny budget
	// and `templates rm`; beta, built then, stays as the one just built.
	tiny := writePolicy(t, fmt.Sprintf("templates_build: {disk_mb: 16}\ntemplates:\n  %s: {context: %s, build_args: {V: \"2\"}}\n  %s: {context: %s}\n", a, ctxA, b, ctxB))
	s := startServerIn(t, state, "SANDBOXER_POLICY="+tiny)
	cleanupWorkspace(t, "w"+sfx)
	s.ok("create_workspace", map[string]any{"name": "w" + sfx, "language": a})
	if out := s.wsOut("w"+sfx, "cat /opt/v /opt/f.txt"); out != "2\ntwo\n" {
		t.Fatalf("a workspace on the template: %q", out)
	}
	build(tiny, b)
	list, _ = templatesCLI(t, state, tiny, "list")
	if strings.Contains(list, "not built: sandboxer templates build "+a) {
		t.Fatalf("the disk budget removed a template in use:\n%s", list)
	}
	if out, err := templatesCLI(t, state, tiny, "rm", a); err == nil || !strings.Contains(out, "is in use") {
		t.Fatalf("templates rm of a template in use: %v\n%s", err, out)
	}
	s.ok("delete_workspace", map[string]any{"name": "w" + sfx})
	// Now alpha is unused and least recently used: building beta anew
	// (--no-cache) removes it, keeping beta.
	build(tiny, "--no-cache", b)
	list, _ = templatesCLI(t, state, tiny, "list")
	if !strings.Contains(list, "(not built: sandboxer templates build "+a+")") || strings.Contains(list, "(not built: sandboxer templates build "+b+")") {
		t.Fatalf("with a tiny budget, want %s removed and %s kept:\n%s", a, b, list)
	}
}

// TestSnapshotWorkspace: a workspace where install_packages added a Debian
// package and a file was written becomes a template; a fresh job from it
// has both, and a new workspace from it starts with the file.
func TestSnapshotWorkspace(t *testing.T) {
	t.Parallel()
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	snap := "snap" + sfx
	removeTemplateImages(t, snap)
	s := startServer(t, "SANDBOXER_TOOLSETS=all")
	ws := "src" + sfx
	cleanupWorkspace(t, ws)
	cleanupWorkspace(t, "dst"+sfx)
	s.ok("create_workspace", map[string]any{"name": ws})
	if r := s.ok("install_packages", map[string]any{"workspace": ws, "by_manager": map[string]any{"apt": []any{"hello"}}}); r["installed"] != true {
		t.Fatalf("install hello: %v", r)
	}
	s.ok("write_file", map[string]any{"workspace": ws, "path": "notes/data.txt", "content": "kept\n"})
	r := s.ok("snapshot_workspace", map[string]any{"workspace": ws, "template": snap})
	if str(r, "template") != snap || str(r, "language") != "bash" || len(str(r, "key")) != 12 {
		t.Fatalf("snapshot_workspace: %v", r)
	}
	job := s.ok("run_command", map[string]any{"language": snap, "command": "hello; cat notes/data.txt; id -u"})
	if str(job, "stdout") != "Hello, world!\nkept\n1000\n" {
		t.Fatalf("a fresh job from the snapshot: %v", job)
	}
	s.ok("create_workspace", map[string]any{"name": "dst" + sfx, "language": snap})
	if out := s.wsOut("dst"+sfx, "cat notes/data.txt; hello"); out != "kept\nHello, world!\n" {
		t.Fatalf("a new workspace from the snapshot: %q", out)
	}
	msg := s.toolErr("snapshot_workspace", map[string]any{"workspace": ws, "template": "python"})
	if !strings.Contains(msg, "built-in language") {
		t.Errorf("a snapshot named like a language: %s", msg)
	}
	s.ok("delete_workspace", map[string]any{"name": ws})
	s.ok("delete_workspace", map[string]any{"name": "dst" + sfx})
}

// TestHTTPSnapshotsAreTheTenants: alice's snapshot is hers alone. Bob
// naming it as a language gets, byte for byte, what he gets on a server
// where it does not exist; list_languages does not show it to him; his own
// snapshot of that name is his and leaves hers as it was (THREATS 117).
func TestHTTPSnapshotsAreTheTenants(t *testing.T) {
	t.Parallel()
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	snap := "tsnap" + sfx
	removeTemplateImages(t, snap)
	h := startHTTPServer(t, "--toolsets", "all")
	empty := startHTTPServer(t, "--toolsets", "all")
	alice, bob, bobElsewhere := h.client(aliceToken), h.client(bobToken), empty.client(bobToken)
	ws := "tws" + sfx
	cleanupWorkspace(t, ws)
	defer func() {
		callHTTP(t, alice, "delete_workspace", map[string]any{"name": ws})
		callHTTP(t, bob, "delete_workspace", map[string]any{"name": ws})
	}()
	for _, c := range []*client.Client{alice, bob} {
		if res := callHTTP(t, c, "create_workspace", map[string]any{"name": ws}); res.IsError {
			t.Fatalf("create_workspace: %s", text(res))
		}
	}
	callHTTP(t, alice, "write_file", map[string]any{"workspace": ws, "path": "who.txt", "content": "alice\n"})
	callHTTP(t, bob, "write_file", map[string]any{"workspace": ws, "path": "who.txt", "content": "bob\n"})
	if res := callHTTP(t, alice, "snapshot_workspace", map[string]any{"workspace": ws, "template": snap}); res.IsError {
		t.Fatalf("alice's snapshot: %s", text(res))
	}
	run := map[string]any{"language": snap, "command": "cat who.txt"}
	if got, want := answer(t, bob, "run_command", run), answer(t, bobElsewhere, "run_command", run); got != want {
		t.Fatalf("bob naming alice's snapshot:\n got %s\nwant %s", got, want)
	}
	if langs := text(callHTTP(t, bob, "list_languages", map[string]any{})); strings.Contains(langs, snap) {
		t.Fatalf("bob's list_languages shows alice's snapshot:\n%s", langs)
	}
	if res := callHTTP(t, bob, "snapshot_workspace", map[string]any{"workspace": ws, "template": snap}); res.IsError {
		t.Fatalf("bob's snapshot of the same name: %s", text(res))
	}
	for c, want := range map[*client.Client]string{alice: "alice\n", bob: "bob\n"} {
		res := callHTTP(t, c, "run_command", run)
		if res.IsError || str(structured(t, res), "stdout") != want {
			t.Errorf("a job on the snapshot: %s, want %q", text(res), want)
		}
	}
}

// TestTemplateDockerfileBypassesRefused: the review's four ways past the
// Dockerfile check (the escape directive, a blank line in a continuation,
// ONBUILD, COPY --from after a blank continuation line), and a # syntax
// front end and an ARG-named --from, are each refused naming the line;
// the URL they name, a listener on the host's loopback, is never fetched.
func TestTemplateDockerfileBypassesRefused(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var fetched atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fetched.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	url := "http://" + ln.Addr().String() + "/payload"
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	cases := []struct{ name, dockerfile, want string }{
		{"esc", "# escape=`\nFROM sandboxer/base:latest\nADD `\n" + url + " /x\n", `line 3, "ADD ` + url + ` /x": ADD of ` + url + " is refused"},
		{"blank", "FROM sandboxer/base:latest\nADD \\\n\n" + url + " /x\n", `line 2, "ADD ` + url + ` /x": ADD of`},
		{"onbuild", "FROM sandboxer/base:latest\nONBUILD ADD " + url + " /x\n", `line 2, "ONBUILD ADD ` + url + ` /x": ADD of`},
		{"copyfrom", "FROM sandboxer/base:latest\nCOPY \\\n\n--from=sandboxer/javascript:latest /usr/local/bin/node /x\n", `line 2, "COPY --from=sandboxer/javascript:latest /usr/local/bin/node /x": COPY --from=sandboxer/javascript:latest is refused`},
		{"syntax", "# syntax=docker/dockerfile:1\nFROM sandboxer/base:latest\n", "the # syntax=docker/dockerfile:1 directive is refused"},
		{"argfrom", "FROM sandboxer/base:latest\nARG IMG=sandboxer/javascript:latest\nCOPY --from=$IMG /usr/local/bin/node /x\n", `line 3, "COPY --from=$IMG /usr/local/bin/node /x": COPY --from=$IMG is refused`},
	}
	var pol strings.Builder
	pol.WriteString("templates:\n")
	for _, c := range cases {
		removeTemplateImages(t, c.name+sfx)
		fmt.Fprintf(&pol, "  %s%s: {context: %s}\n", c.name, sfx, templateDir(t, c.dockerfile, nil))
	}
	s := startServer(t, policyEnv(t, pol.String()))
	for _, c := range cases {
		if msg := s.toolErr("run_command", map[string]any{"language": c.name + sfx, "command": "true"}); !strings.Contains(msg, c.want) {
			t.Errorf("%s: %s\nwant %q", c.name, msg, c.want)
		}
	}
	if n := fetched.Load(); n != 0 {
		t.Errorf("the URL was fetched %d times", n)
	}
}

// TestSnapshotOfABigWorkspace: a workspace of some 300 MB (a big random
// file, a thousand small ones, a setuid copy of bash, a 2777 directory, a
// link to /etc/shadow) is snapshotted (before the fix, a workspace over a
// pipe's buffer never answered). A workspace made from it sees the files;
// the link stays a link that reads nothing; setuid and setgid bits on the
// files are dropped, and its jobs run with no-new-privileges and no
// capabilities, so a setuid program an install put in the root gains
// nothing either.
func TestSnapshotOfABigWorkspace(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	snap, ws := "big"+sfx, "bigws"+sfx
	removeTemplateImages(t, snap)
	cleanupWorkspace(t, ws)
	s := startServer(t, "SANDBOXER_TOOLSETS=all", policyEnv(t, "templates_build: {max_context_mb: 512}\n"))
	s.ok("create_workspace", map[string]any{"name": ws})
	s.wsOut(ws, `set -e
head -c 300M /dev/urandom > big.bin; sha256sum big.bin > big.sum
mkdir -p many; for i in $(seq 1000); do echo "file $i" > many/f$i.txt; done
cp /bin/bash suidbash; chmod 4755 suidbash
mkdir shared; chmod 2777 shared; echo x > shared/in
ln -s /etc/shadow shadowlink; ln -s many/f7.txt rel`)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	res := s.callCtx(ctx, "snapshot_workspace", map[string]any{"workspace": ws, "template": snap})
	if res.IsError {
		t.Fatalf("snapshot_workspace: %s", text(res))
	}
	t.Logf("snapshot of a 300 MB workspace: %s", time.Since(start).Round(time.Millisecond))
	// A fresh job's /workspace is a tmpfs smaller than this: it says so.
	if r := s.call("run_command", map[string]any{"language": snap, "command": "true"}); !strings.Contains(text(r), "the template's files do not fit in /workspace") {
		t.Errorf("a fresh job from a snapshot larger than its /workspace: %s", text(r))
	}
	cleanupWorkspace(t, "from"+sfx)
	s.ok("create_workspace", map[string]any{"name": "from" + sfx, "language": snap})
	job := s.ok("run_command", map[string]any{"workspace": "from" + sfx, "timeout_s": 120, "command": `
sha256sum -c big.sum >/dev/null && echo "sum=ok"
echo "many=$(ls many | wc -l) f7=$(cat rel)"
echo "link=$(readlink shadowlink) read=$(cat shadowlink >/dev/null 2>&1 && echo yes || echo no)"
echo "suid=$(stat -c %a suidbash) shared=$(stat -c %a shared) in=$(cat shared/in)"
echo "nnp=$(awk '/NoNewPrivs/{print $2}' /proc/self/status) capeff=$(awk '/CapEff/{print $2}' /proc/self/status) uid=$(id -u)"`})
	f := fFields(str(job, "stdout"))
	want := map[string]string{"sum": "ok", "many": "1000 f7=file 7", "link": "/etc/shadow read=no", "suid": "755 shared=755 in=x", "nnp": "1 capeff=0000000000000000 uid=1000"}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s=%q, want %q\n%v", k, f[k], v, job)
		}
	}
	s.ok("delete_workspace", map[string]any{"name": ws})
	s.ok("delete_workspace", map[string]any{"name": "from" + sfx})
}
