package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// write_file, read_file, list_files: the workspace's files, reached inside its
// container; never anything on the host.

func TestWorkspaceFileTools(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "pool:\n  enabled: false\n"))
	name := "e2e-files"
	s.createWS(name, nil)

	// write_file, then a job reads it.
	w := s.ok("write_file", map[string]any{"workspace": name, "path": "src/hello.sh", "content": "echo hi from a file\n", "mode": "0755"})
	if str(w, "path") != "/workspace/src/hello.sh" || w["size"].(float64) != 20 || str(w, "mode") != "0755" {
		t.Fatalf("write_file: %v", w)
	}
	if out := s.wsOut(name, "cat src/hello.sh; ./src/hello.sh; stat -c '%u %a' src/hello.sh"); out != "echo hi from a file\nhi from a file\n1000 755\n" {
		t.Fatalf("a job reading what write_file wrote: %q", out)
	}
	s.ok("write_file", map[string]any{"workspace": name, "path": "/workspace/src/hello.sh", "content": "echo more\n", "append": true})
	if out := s.wsOut(name, "cat src/hello.sh"); out != "echo hi from a file\necho more\n" {
		t.Fatalf("after append: %q", out)
	}

	// A file a job writes is returned by read_file; line ranges and caps.
	s.wsOut(name, "seq 1 100 > nums.txt")
	r := s.ok("read_file", map[string]any{"workspace": name, "path": "nums.txt", "offset_line": 10, "limit_lines": 3})
	if str(r, "content") != "10\n11\n12\n" || str(r, "encoding") != "text" || r["more_lines"] != true || r["size"].(float64) != 292 {
		t.Fatalf("read_file lines 10-12: %v", r)
	}
	r = s.ok("read_file", map[string]any{"workspace": name, "path": "/workspace/nums.txt", "max_bytes": 4})
	if str(r, "content") != "1\n2\n" || r["truncated"] != true {
		t.Fatalf("read_file max_bytes 4: %v", r)
	}

	// Binary round-trips through base64, both ways.
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	b64 := base64.StdEncoding.EncodeToString(bin)
	s.ok("write_file", map[string]any{"workspace": name, "path": "bin/all.bytes", "content": b64, "encoding": "base64"})
	if out := s.wsOut(name, "od -An -tx1 bin/all.bytes | tr -d ' \\n' | md5sum | cut -c1-8; wc -c < bin/all.bytes"); !strings.HasSuffix(out, "\n256\n") {
		t.Fatalf("binary written: %q", out)
	}
	r = s.ok("read_file", map[string]any{"workspace": name, "path": "bin/all.bytes"})
	if str(r, "encoding") != "base64" || str(r, "content") != b64 {
		t.Fatalf("binary read: %v", r)
	}
	s.wsOut(name, "head -c 300 /dev/urandom > bin/rand; base64 -w0 bin/rand > bin/rand.b64")
	r = s.ok("read_file", map[string]any{"workspace": name, "path": "bin/rand"})
	want := s.ok("read_file", map[string]any{"workspace": name, "path": "bin/rand.b64"})
	if str(r, "encoding") != "base64" || str(r, "content") != str(want, "content") {
		t.Fatalf("a job's binary file, read: %v, want %v", r, want)
	}

	// list_files.
	l := s.ok("list_files", map[string]any{"workspace": name, "recursive": true})
	var paths []string
	for _, e := range l["entries"].([]any) {
		m := e.(map[string]any)
		paths = append(paths, str(m, "path")+":"+str(m, "type"))
	}
	if got := strings.Join(paths, " "); got != "bin:dir nums.txt:file src:dir bin/all.bytes:file bin/rand:file bin/rand.b64:file src/hello.sh:file" {
		t.Fatalf("list_files: %s", got)
	}
	l = s.ok("list_files", map[string]any{"workspace": name, "path": "src", "glob": "*.sh"})
	e := l["entries"].([]any)[0].(map[string]any)
	if len(l["entries"].([]any)) != 1 || str(e, "name") != "hello.sh" || str(e, "mode") != "0755" || e["size"].(float64) != 30 || str(e, "mtime") == "" {
		t.Fatalf("list_files src *.sh: %v", l)
	}
	if l = s.ok("list_files", map[string]any{"workspace": name, "recursive": true, "max_entries": 2}); len(l["entries"].([]any)) != 2 || l["truncated"] != true {
		t.Fatalf("list_files max_entries 2: %v", l)
	}
}

func TestWorkspaceFileToolsNeverTouchTheHost(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "pool:\n  enabled: false\n"))
	name := "e2e-files-host"
	s.createWS(name, nil)

	// A host file with a unique marker: it must never come back.
	marker := fmt.Sprintf("HOST-MARKER-%d", time.Now().UnixNano())
	hostDir := t.TempDir()
	hostFile := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(hostFile, []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noMarker := func(what string, v any) {
		t.Helper()
		if strings.Contains(fmt.Sprint(v), marker) {
			t.Fatalf("%s returned the host's file: %v", what, v)
		}
	}

	// Refused before any engine call: '..', absolute paths outside /workspace, NUL.
	for _, p := range []string{"../../etc/passwd", "/etc/passwd", "/workspace/../etc/passwd", hostFile, "a\x00b"} {
		for _, tool := range []string{"read_file", "write_file", "list_files"} {
			args := map[string]any{"workspace": name, "path": p, "content": "x"}
			if tool != "write_file" {
				delete(args, "content")
			}
			msg := s.toolErr(tool, args)
			if !strings.HasPrefix(msg, "path ") {
				t.Fatalf("%s %q: %s", tool, p, msg)
			}
			noMarker(tool, msg)
		}
	}

	// Symbolic links a job planted are refused, wherever they are in the path.
	hostTarget := filepath.Join(hostDir, "made-by-write")
	s.wsOut(name, fmt.Sprintf("ln -s /etc/passwd out; ln -s %s secret; ln -s %s hostdir; ln -s %s w; mkdir -p real; ln -s /etc real/etc",
		hostFile, hostDir, hostTarget))
	for _, p := range []string{"out", "secret", "hostdir/secret", "/workspace/secret", "real/etc/passwd"} {
		msg := s.toolErr("read_file", map[string]any{"workspace": name, "path": p})
		if !strings.Contains(msg, "symbolic link") || !strings.Contains(msg, "path") {
			t.Fatalf("read_file %q through a link: %s", p, msg)
		}
		noMarker("read_file", msg)
	}
	for _, p := range []string{"w", "hostdir/made-by-write", "hostdir/sub/made-by-write", "secret"} {
		msg := s.toolErr("write_file", map[string]any{"workspace": name, "path": p, "content": "PWNED"})
		if !strings.Contains(msg, "symbolic link") {
			t.Fatalf("write_file %q through a link: %s", p, msg)
		}
	}
	if _, err := os.Lstat(hostTarget); !os.IsNotExist(err) {
		t.Fatalf("write_file through a link made %s on the host: %v", hostTarget, err)
	}
	if _, err := os.Lstat(filepath.Join(hostDir, "sub")); !os.IsNotExist(err) {
		t.Fatalf("write_file through a link made a directory on the host: %v", err)
	}
	if b, _ := os.ReadFile(hostFile); string(b) != marker+"\n" {
		t.Fatalf("the host file changed: %q", b)
	}
	if msg := s.toolErr("list_files", map[string]any{"workspace": name, "path": "hostdir"}); !strings.Contains(msg, "symbolic link") {
		t.Fatalf("list_files through a link: %s", msg)
	}
	// Listing shows the links as links, not what they point to.
	l := s.ok("list_files", map[string]any{"workspace": name, "recursive": true})
	noMarker("list_files", l)
	for _, e := range l["entries"].([]any) {
		m := e.(map[string]any)
		if str(m, "path") == "real/etc/passwd" || strings.HasPrefix(str(m, "path"), "hostdir/") {
			t.Fatalf("list_files followed a link: %v", m)
		}
		if str(m, "name") == "out" && (str(m, "type") != "symlink" || str(m, "target") != "/etc/passwd") {
			t.Fatalf("list_files link entry: %v", m)
		}
	}
	// Other refusals name the argument.
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"write_file", map[string]any{"path": "x", "content": "!!", "encoding": "base64"}, "content is not valid base64"},
		{"write_file", map[string]any{"path": "x", "content": "x", "mode": "999"}, "mode"},
		{"write_file", map[string]any{"path": "x", "content": "x", "mode": "01777"}, "mode"},
		{"write_file", map[string]any{"path": "/workspace", "content": "x"}, "path"},
		{"read_file", map[string]any{"path": "nope"}, "no such file"},
		{"read_file", map[string]any{"path": "real"}, "directory"},
		{"list_files", map[string]any{"glob": "a/b"}, "glob"},
		{"read_file", map[string]any{"path": "x", "max_bytes": 9 << 20}, "max_bytes"},
	} {
		c.args["workspace"] = name
		if msg := s.toolErr(c.tool, c.args); !strings.Contains(msg, c.want) {
			t.Fatalf("%s %v: %s", c.tool, c.args, msg)
		}
	}
	if msg := s.toolErr("read_file", map[string]any{"workspace": "nope", "path": "x"}); !strings.Contains(msg, "no such workspace") {
		t.Fatalf("read_file in a missing workspace: %s", msg)
	}
}
