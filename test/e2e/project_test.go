package e2e

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The user's project end to end, as an agent works on it: a granted mount
// with a failing test, an import, a fix, the patch back, a fork, a port.

const hostSecret = "HOST-SECRET-never-in-a-sandbox"

// calcFixture writes a Go module whose test fails (Add subtracts), plus a
// link to a host secret outside the tree, a FIFO and a binary file.
func calcFixture(t *testing.T) (src, secretPath string) {
	t.Helper()
	src = t.TempDir()
	secretDir := t.TempDir()
	secretPath = filepath.Join(secretDir, "secret.txt")
	files := map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.21\n",
		"calc.go":      "package calc\n\n// Add adds.\nfunc Add(a, b int) int {\n\treturn a - b\n}\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif got := Add(2, 3); got != 5 {\n\t\tt.Fatalf(\"Add(2, 3) = %d, want 5\", got)\n\t}\n}\n",
		"old.txt":      "to be deleted\n",
		"docs/a.md":    "# A\n",
	}
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "logo.bin"), []byte("\x00\x01binary\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretPath, []byte(hostSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secretPath, filepath.Join(src, "secret-link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{src, filepath.Join(src, "docs"), secretDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return src, secretPath
}

// TestProjectImportFixAndPatch is the whole path: tests run from the
// read-only mount and fail; an imported workspace is fixed; the patch it
// returns, applied by git to a copy of the source, makes the tests pass.
func TestProjectImportFixAndPatch(t *testing.T) {
	t.Parallel()
	src, _ := calcFixture(t)
	s := startServer(t, policyEnv(t, "mounts:\n  - {name: calc, source: "+src+"}\n"))

	// From the mount: the tests run and fail, and a write fails.
	r := s.call("run_command", map[string]any{"language": "go", "mounts": []any{"calc"},
		"command": "cd /mnt/calc && go test ./... 2>&1; touch /mnt/calc/x 2>/dev/null || echo WRITE-REFUSED"})
	got := structured(t, r)
	if out := str(got, "stdout"); !strings.Contains(out, "Add(2, 3) = -1, want 5") || !strings.Contains(out, "WRITE-REFUSED") {
		t.Fatalf("tests from the mount: %v", got)
	}

	// Import: the tree, links as links, the FIFO skipped and listed.
	created := s.createWS("e2e-calc", map[string]any{"language": "go", "import": "calc"})
	origin, _ := created["origin"].(map[string]any)
	if origin == nil || str(origin, "import") != "calc" || !strings.Contains(mustJSON(origin["skipped"]), `"pipe"`) {
		t.Fatalf("import's origin: %v", created)
	}
	out := s.wsOut("e2e-calc", "ls -A | sort | tr '\\n' ' '; readlink secret-link; cat secret-link 2>&1; stat -c '%a %u' calc.go")
	if strings.Contains(out, hostSecret) || !strings.Contains(out, "calc.go") || strings.Contains(out, "pipe") ||
		!strings.Contains(out, "644 1000") {
		t.Fatalf("the imported tree: %q", out)
	}
	// The fix, a new file, a deleted one.
	if out := s.wsOut("e2e-calc", "sed -i 's/a - b/a + b/' calc.go && printf 'fixed Add\\n' > NOTES.md && rm old.txt && go test ./... 2>&1"); !strings.Contains(out, "ok") {
		t.Fatalf("tests after the fix: %q", out)
	}

	diff, changes := readChanges(t, s, "e2e-calc", 0)
	for _, want := range []string{"diff --git a/calc.go b/calc.go", "+\treturn a + b", "--- /dev/null\n+++ b/NOTES.md", "+++ /dev/null", "deleted file mode 100644"} {
		if !strings.Contains(diff, want) {
			t.Fatalf("patch lacks %q:\n%s", want, diff)
		}
	}
	if strings.Contains(diff, hostSecret) || strings.Contains(diff, ".cache") {
		t.Fatalf("patch holds the host secret or a cache:\n%s", diff)
	}
	if len(changes) != 3 {
		t.Fatalf("changes: %v, want calc.go modified, NOTES.md added, old.txt deleted", changes)
	}
	// Read in small pages, the patch is the same.
	if paged, _ := readChanges(t, s, "e2e-calc", 97); paged != diff {
		t.Fatalf("the patch read in pages differs:\n%s\n---\n%s", paged, diff)
	}

	// git apply on a copy of the source; its tests then pass on the host.
	cp := t.TempDir()
	if out, err := exec.Command("sh", "-c", "cd "+src+" && tar cf - --exclude=pipe . | tar xf - -C "+cp).CombinedOutput(); err != nil {
		t.Fatalf("copy the fixture: %v %s", err, out)
	}
	apply := exec.Command("git", "apply", "-v", "-")
	apply.Dir, apply.Stdin = cp, strings.NewReader(diff)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, diff)
	}
	test := exec.Command("go", "test", "./...")
	test.Dir, test.Env = cp, append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	if out, err := test.CombinedOutput(); err != nil {
		t.Fatalf("go test after git apply: %v\n%s", err, out)
	}
	// sandboxer never wrote the source.
	if b, _ := os.ReadFile(filepath.Join(src, "calc.go")); !bytes.Contains(b, []byte("a - b")) {
		t.Fatal("the mount's source changed")
	}

	// A fork: the files and the baseline, then its own volume.
	fork := s.createWS("e2e-calc-fork", map[string]any{"from": "e2e-calc"})
	if o, _ := fork["origin"].(map[string]any); o == nil || str(o, "from") != "e2e-calc" {
		t.Fatalf("fork's origin: %v", fork)
	}
	if forkDiff, _ := readChanges(t, s, "e2e-calc-fork", 0); forkDiff != diff {
		t.Fatalf("the fork's changes differ from its source's:\n%s\n---\n%s", forkDiff, diff)
	}
	s.wsOut("e2e-calc-fork", "echo fork-only > fork.txt")
	s.wsOut("e2e-calc", "echo source-only > source.txt")
	if out := s.wsOut("e2e-calc", "ls"); strings.Contains(out, "fork.txt") {
		t.Fatalf("a write in the fork shows in its source: %q", out)
	}
	if out := s.wsOut("e2e-calc-fork", "ls"); strings.Contains(out, "source.txt") || !strings.Contains(out, "NOTES.md") {
		t.Fatalf("the fork: %q", out)
	}
	s.checkRaces()
}

// readChanges reads a workspace's whole patch, page by page when page > 0.
func readChanges(t *testing.T, s *server, ws string, page int) (string, []any) {
	t.Helper()
	var diff strings.Builder
	var changes []any
	cursor := 0.0
	for i := 0; ; i++ {
		args := map[string]any{"workspace": ws, "cursor": cursor}
		if page > 0 {
			args["max_bytes"] = page
		}
		r := s.ok("workspace_changes", args)
		diff.WriteString(str(r, "diff"))
		changes, _ = r["changes"].([]any)
		if r["has_more"] != true {
			return diff.String(), changes
		}
		if next := num(t, r, "next_cursor"); next <= cursor || i > 1000 {
			t.Fatalf("paging does not advance: %v", r)
		} else {
			cursor = next
		}
	}
}

// TestImportRefusesWhatItMustNot: a tree past the quota (a huge sparse
// file) fails at once and makes nothing; a FIFO neither hangs the copy nor
// comes along.
func TestImportRefusesWhatItMustNot(t *testing.T) {
	t.Parallel()
	src, _ := calcFixture(t)
	f, err := os.Create(filepath.Join(src, "huge.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 30); err != nil { // sparse: 64 GiB of nothing
		t.Fatal(err)
	}
	f.Close()
	s := startServer(t, policyEnv(t, "mounts:\n  - {name: big, source: "+src+"}\nworkspaces:\n  disk_mb: 64\n"))
	msg := s.toolErr("create_workspace", map[string]any{"name": "e2e-big", "import": "big"})
	if !strings.Contains(msg, "disk_mb") || !strings.Contains(msg, "nothing was made") {
		t.Fatalf("an import past the quota: %q", msg)
	}
	if c, v := wsEngineObjects(t, "e2e-big"); c+v != 0 {
		t.Fatalf("a refused import left %d containers and %d volumes", c, v)
	}
	if list := s.ok("list_workspaces", map[string]any{}); strings.Contains(mustJSON(list), "e2e-big") {
		t.Fatalf("a refused import left a workspace: %v", list)
	}
	if msg := s.toolErr("create_workspace", map[string]any{"name": "e2e-x", "import": "nope"}); !strings.Contains(msg, "import") || !strings.Contains(msg, "big") {
		t.Fatalf("an ungranted import: %q", msg)
	}
	if msg := s.toolErr("create_workspace", map[string]any{"name": "e2e-x", "from": "e2e-none"}); !strings.Contains(msg, "e2e-none") {
		t.Fatalf("a fork of nothing: %q", msg)
	}
}

// TestExposePort: a server in a workspace answers on a loopback URL of the
// server host, while the workspace still has no network; a port where
// nothing listens fails at once; a closed port answers no more.
func TestExposePort(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.createWS("e2e-web", map[string]any{"language": "python"})
	s.wsOut("e2e-web", "mkdir -p site && echo hello-from-the-workspace > site/index.html")
	s.ok("run_command", map[string]any{"workspace": "e2e-web", "background": true,
		"command": "cd site && exec python3 -m http.server 8000 --bind 127.0.0.1"})
	var r map[string]any
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r = s.ok("expose_port", map[string]any{"workspace": "e2e-web", "port": 8000})
		if r["listening"] == true || time.Now().After(deadline) {
			break
		}
	}
	url := str(r, "url")
	if r["listening"] != true || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("expose_port: %v", r)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < 3; i++ { // several connections, one relay each
		resp, err := client.Get(url + "index.html")
		if err != nil {
			t.Fatalf("GET through the relay: %v", err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || b.String() != "hello-from-the-workspace\n" {
			t.Fatalf("GET through the relay: %s %q", resp.Status, b.String())
		}
	}
	// Threat: the URL listens on loopback only.
	host, port, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	if host != "127.0.0.1" {
		t.Fatalf("the URL's host is %s", host)
	}
	if out, _ := exec.Command("sh", "-c", "ss -ltnH 'sport = :"+port+"'").CombinedOutput(); len(out) > 0 && !strings.Contains(string(out), "127.0.0.1:"+port) {
		t.Fatalf("the relay listens beyond loopback: %s", out)
	}
	// The workspace gained no network.
	if out := s.wsOut("e2e-web", "ls /sys/class/net | tr '\\n' ' '"); strings.TrimSpace(out) != "lo" {
		t.Fatalf("a workspace with an exposed port sees interfaces %q", out)
	}
	if ports := mustJSON(s.ok("list_workspaces", map[string]any{})); !strings.Contains(ports, url) {
		t.Fatalf("list_workspaces does not list the open port: %s", ports)
	}
	// Nothing listens: an error at once, not a hang.
	dead := s.ok("expose_port", map[string]any{"workspace": "e2e-web", "port": 8001})
	if dead["listening"] != false {
		t.Fatalf("expose_port of a silent port: %v", dead)
	}
	t0 := time.Now()
	if _, err := client.Get(str(dead, "url")); err == nil {
		t.Fatal("a GET to a port where nothing listens succeeded")
	} else if time.Since(t0) > 25*time.Second {
		t.Fatalf("a GET to a silent port took %s to fail: %v", time.Since(t0), err)
	}
	// Limits and closing.
	for p := 8002; p <= 8003; p++ {
		s.ok("expose_port", map[string]any{"workspace": "e2e-web", "port": p})
	}
	if msg := s.toolErr("expose_port", map[string]any{"workspace": "e2e-web", "port": 8004}); !strings.Contains(msg, "max_ports") {
		t.Fatalf("a fifth port: %q", msg)
	}
	closed := s.ok("expose_port", map[string]any{"workspace": "e2e-web", "port": 8000, "close": true})
	if closed["closed"] != true {
		t.Fatalf("close: %v", closed)
	}
	if _, err := client.Get(url); err == nil {
		t.Fatal("a closed port still answers")
	}
	s.ok("delete_workspace", map[string]any{"name": "e2e-web"})
	if _, err := client.Get(str(dead, "url")); err == nil {
		t.Fatal("a deleted workspace's port still answers")
	}
	s.checkRaces()
}

// TestPatchOfHostileNamesApplies: names holding a newline (built to forge
// headers of their own), a quote, a backslash, bytes above 0x7f, and a
// binary file come back as one patch whose headers name exactly the changed
// files, and `git apply` of it makes exactly the workspace's tree (THREATS
// 105).
func TestPatchOfHostileNamesApplies(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.createWS("e2e-hostile", map[string]any{})
	s.wsOut("e2e-hostile", `d=$(printf 'x\n--- /dev/null\n+++ b/PWNED\n@@ -0,0 +1 @@\n+pwned') && mkdir -p "$d" && printf 'inside\n' > "$d/f" &&
printf 'quoted\n' > 'q"uote\back' && printf 'latin\n' > "$(printf 'caf\351')" && head -c 3000 /dev/urandom > blob.bin &&
printf 'x\000y' >> blob.bin && ln -s '../elsewhere' link && printf '#!/bin/sh\n' > run.sh && chmod +x run.sh`)
	diff, changes := readChanges(t, s, "e2e-hostile", 0)
	if n := strings.Count(diff, "diff --git "); n != 6 || len(changes) != 6 {
		t.Fatalf("%d headers and %d changes for 6 new paths:\n%s", n, len(changes), diff)
	}
	for _, want := range []string{`"a/x\n--- /dev/null\n+++ b/PWNED\n@@ -0,0 +1 @@\n+pwned/f"`, `"b/q\"uote\\back"`, `"b/caf\351"`, "GIT binary patch", "new file mode 120000", "new file mode 100755"} {
		if !strings.Contains(diff, want) {
			t.Fatalf("patch lacks %s:\n%s", want, diff)
		}
	}
	dir := t.TempDir()
	apply := exec.Command("git", "apply", "-")
	apply.Dir, apply.Stdin = dir, strings.NewReader(diff)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, diff)
	}
	if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
		t.Fatal("the patch made PWNED, a file no change names")
	}
	// In base64: a name that is not UTF-8 would not survive JSON as it is.
	const list = "{ find . -path ./.cache -prune -o ! -type d -print0 | sort -z | xargs -0 sha256sum 2>/dev/null; readlink link; } | base64 -w0"
	want := s.wsOut("e2e-hostile", list)
	got, err := exec.Command("sh", "-c", "cd "+dir+" && "+list).CombinedOutput()
	if err != nil || string(got) != want {
		t.Fatalf("after git apply:\n%s\nthe workspace:\n%s", got, want)
	}
	s.checkRaces()
}

// TestMountLinkSwappedAfterLoad: a granted source that is a link to the
// project loads and mounts the project; once the link is swapped to /run
// (the engine's socket directory), the next use is refused naming the
// policy key, and no job sees /run (THREATS 106).
func TestMountLinkSwappedAfterLoad(t *testing.T) {
	t.Parallel()
	src, _ := calcFixture(t)
	link := filepath.Join(t.TempDir(), "project")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, policyEnv(t, "mounts:\n  - {name: proj, source: "+link+"}\n"))
	if out := str(s.ok("run_command", map[string]any{"mounts": []any{"proj"}, "command": "ls /mnt/proj"}), "stdout"); !strings.Contains(out, "calc.go") {
		t.Fatalf("the mount through its link: %q", out)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"run_command", map[string]any{"mounts": []any{"proj"}, "command": "ls -la /mnt/proj"}},
		{"create_workspace", map[string]any{"name": "e2e-swapped", "import": "proj"}},
		{"create_workspace", map[string]any{"name": "e2e-swapped", "mounts": []any{"proj"}}},
	} {
		msg := s.toolErr(c.tool, c.args)
		if !strings.Contains(msg, "mounts[0].source") || !strings.Contains(msg, "/run") {
			t.Fatalf("%s with the swapped link: %q", c.tool, msg)
		}
	}
	s.checkRaces()
}

// TestMountSetuidAndDevicesDoNothing: Docker cannot put nosuid,nodev on a
// bind (runc's read-only remount drops them: docs/security.md), so this
// shows what holds instead: a setuid-root program in a granted tree runs as
// the sandbox's user (no_new_privs), and a device node there cannot be
// opened (the engine's device cgroup, no CAP_MKNOD).
func TestMountSetuidAndDevicesDoNothing(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a setuid-root program and a device node")
	}
	src := t.TempDir()
	os.Chmod(src, 0o755)
	if out, err := exec.Command("sh", "-c", "cp /usr/bin/id "+src+"/suid-id && chown 0:0 "+src+"/suid-id && chmod 4755 "+src+"/suid-id && mknod "+src+"/mem c 1 1 && chmod 666 "+src+"/mem").CombinedOutput(); err != nil {
		t.Fatalf("fixture: %v %s", err, out)
	}
	s := startServer(t, policyEnv(t, "mounts:\n  - {name: dev, source: "+src+"}\n"))
	out := str(s.ok("run_command", map[string]any{"mounts": []any{"dev"},
		"command": "stat -c '%A %u' /mnt/dev/suid-id; /mnt/dev/suid-id -u; head -c 1 /mnt/dev/mem >/dev/null 2>&1 && echo DEVICE-READ || echo DEVICE-REFUSED; grep ' /mnt/dev ' /proc/self/mountinfo"}), "stdout")
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "-rwsr-xr-x 0") || lines[1] != "1000" || lines[2] != "DEVICE-REFUSED" {
		t.Fatalf("setuid and device in a granted mount: %q", out)
	}
	t.Logf("the mount as the sandbox sees it: %s", strings.TrimSpace(strings.Join(lines[3:], " ")))
	s.checkRaces()
}

// TestImportTakesRealTrees (THREATS 107): a tree with a root-only file and
// directory, links leaving it (relative and absolute), a FIFO, a socket and
// a device imports: the links come as links, never followed; everything
// else is left out and listed in origin.skipped with its reason; the
// root-only bytes reach neither the workspace nor its changes' baseline.
func TestImportTakesRealTrees(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make root-only files and a device node")
	}
	const rootOnly = "ROOT-ONLY-never-in-a-workspace"
	base := t.TempDir()
	src := filepath.Join(base, "project")
	for _, d := range []string{src, filepath.Join(src, "lib"), filepath.Join(base, "shared")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
	}
	os.Chmod(base, 0o755)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n"), 0o644))
	must(os.WriteFile(filepath.Join(base, "shared", "x"), []byte("shared\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "secret.key"), []byte(rootOnly), 0o000))
	must(os.Mkdir(filepath.Join(src, "private"), 0o700))
	must(os.WriteFile(filepath.Join(src, "private", "inner"), []byte(rootOnly), 0o600))
	must(os.Symlink("../shared/x", filepath.Join(src, "lib", "shared-link")))
	must(os.Symlink("/etc/shadow", filepath.Join(src, "abs-link")))
	must(syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644))
	must(exec.Command("mknod", filepath.Join(src, "null-dev"), "c", "1", "3").Run())
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(src, "sock"), Net: "unix"})
	must(err)
	l.SetUnlinkOnClose(false)
	l.Close()

	s := startServer(t, policyEnv(t, "mounts:\n  - {name: proj, source: "+src+"}\n"))
	created := s.createWS("e2e-realtree", map[string]any{"import": "proj"})
	origin, _ := created["origin"].(map[string]any)
	skipped := map[string]string{}
	list, _ := origin["skipped"].([]any)
	for _, e := range list {
		f := e.(map[string]any)
		if str(f, "reason") == "" {
			t.Fatalf("a skipped entry without a reason: %v", f)
		}
		skipped[str(f, "path")] = str(f, "type")
	}
	for path, kind := range map[string]string{"secret.key": "unreadable", "private": "unreadable", "pipe": "fifo", "sock": "socket", "null-dev": "device"} {
		if skipped[path] != kind {
			t.Fatalf("origin.skipped: %s is %q, want %s: %v", path, skipped[path], kind, list)
		}
	}
	out := s.wsOut("e2e-realtree", "readlink lib/shared-link abs-link; ls -A | sort | tr '\\n' ' '; cat secret.key private/inner 2>&1; grep -r "+rootOnly+" . 2>/dev/null | head -1")
	if !strings.HasPrefix(out, "../shared/x\n/etc/shadow\n") || strings.Contains(out, rootOnly) || strings.Contains(out, "pipe") || !strings.Contains(out, "main.go") {
		t.Fatalf("the imported tree: %q", out)
	}
	diff, changes := readChanges(t, s, "e2e-realtree", 0)
	if len(changes) != 0 || strings.Contains(diff, rootOnly) {
		t.Fatalf("an unchanged import has changes: %v\n%s", changes, diff)
	}
	s.wsOut("e2e-realtree", "rm -f main.go")
	if diff, _ := readChanges(t, s, "e2e-realtree", 0); !strings.Contains(diff, "deleted file mode 100644") || strings.Contains(diff, rootOnly) {
		t.Fatalf("the changes after a deletion: %s", diff)
	}
	s.checkRaces()
}
