package template

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckDockerfile(t *testing.T) {
	ok := []string{
		"FROM sandboxer/base:latest\nRUN echo hi\nCOPY a b /opt/\n",
		"FROM sandboxer/base:latest AS build\nRUN make\nFROM sandboxer/base:latest\nCOPY --from=build /out /opt/out\nCOPY --from=0 /x /y\n",
		"FROM x\nCOPY --chown=1000:1000 [\"a b\", \"/opt/\"]\nADD local.tgz /opt/\n",
		"FROM x\nCOPY dir/../dir/f /f\n",
		"FROM x\nCOPY <<EOF /etc/motd\nhello ADD https://x/ $HOME\nEOF\nRUN <<EOF\necho hi\nEOF\n",
		"# escape=`\nFROM x\nRUN echo `\n  hi\n",
		"FROM x\nADD --link local.tgz /opt/\nONBUILD RUN echo later\n",
	}
	for _, df := range ok {
		if err := CheckDockerfile(df); err != nil {
			t.Errorf("refused %q: %v", df, err)
		}
	}
	bad := map[string]string{
		"FROM x\nADD https://example.com/a.tgz /opt/\n":       "ADD of https://example.com/a.tgz is refused",
		"FROM x\nADD git@github.com:o/r.git /src\n":           "is refused",
		"FROM x\nCOPY --from=alpine:3 /bin/sh /sh\n":          "--from=alpine:3 is refused",
		"FROM x AS a\nFROM y\nCOPY --from=1 /x /y\n":          "--from=1 is refused",
		"FROM x\nCOPY ../secret /s\n":                         "climbs out of the context",
		"FROM x\nCOPY [\"../../etc/passwd\", \"/p\"]\n":       "climbs out of the context",
		"FROM x\nRUN --mount=type=bind,from=y,target=/m ls\n": "RUN --mount is refused",
		"FROM x\nRUN --network=host curl x\n":                 "RUN --network is refused",
		"RUN echo no from\n":                                  "no FROM",
		"FROM x\nCOPY --weird=1 a b\n":                        "not a flag templates allow",
		// The review's four bypasses, and more of their kind; each names its line.
		"# escape=`\nFROM x\nADD `\nhttp://127.0.0.1:9/x /x\n":                           "line 3, \"ADD http://127.0.0.1:9/x /x\": ADD of http://127.0.0.1:9/x is refused",
		"FROM x\nADD \\\n\n  http://127.0.0.1:9/x /x\n":                                  "line 2, \"ADD http://127.0.0.1:9/x /x\": ADD of",
		"FROM x\nONBUILD ADD http://127.0.0.1:9/x /x\n":                                  "line 2, \"ONBUILD ADD http://127.0.0.1:9/x /x\": ADD of http://127.0.0.1:9/x is refused",
		"FROM x\nCOPY \\\n\n--from=sandboxer/javascript:latest /usr/local/bin/node /x\n": "line 2, \"COPY --from=sandboxer/javascript:latest /usr/local/bin/node /x\": COPY --from=sandboxer/javascript:latest is refused",
		"# syntax=docker/dockerfile:1\nFROM x\n":                                         "# syntax=docker/dockerfile:1 directive is refused",
		"#syntax=evil/frontend\nFROM x\n":                                                "directive is refused",
		"FROM x\nADD --link https://example.com/a /a\n":                                  "ADD of https://example.com/a is refused",
		"FROM x\nARG IMG=sandboxer/javascript:latest\nCOPY --from=$IMG /a /b\n":          "line 3, \"COPY --from=$IMG /a /b\": COPY --from=$IMG is refused",
		"FROM x\nARG U=http://127.0.0.1:9/x\nADD ${U} /x\n":                              "ADD source ${U} is refused",
		"FROM x\nADD github.com/moby/moby.git /src\n":                                    "ADD of github.com/moby/moby.git is refused",
		"FROM x\nADD https://github.com/o/r.git#main /src\n":                             "is refused",
		"FROM x\nADD --checksum=sha256:00 https://example.com/a /a\n":                    "ADD --checksum is refused",
		"FROM x\nONBUILD COPY --from=other:img /a /b\n":                                  "COPY --from=other:img is refused",
		"FROM x\nONBUILD ONBUILD ADD http://x/ /y\n":                                     "refused",
		"FROM x\nCOPY <<EOF ../../escape\nhi\nEOF\nADD <<EOF http://x/ /y\nhi\nEOF\n":    "ADD of http://x/ is refused",
		"FROM x\nRUN --device=/dev/kvm ls\n":                                             "RUN --device is refused",
		"FROM x\nrun --MOUNT=type=bind,target=/m ls\n":                                   "is refused",
	}
	for df, want := range bad {
		err := CheckDockerfile(df)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error with %q", df, err, want)
		}
	}
}

func entries(t *testing.T, tarball []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

// Pack: the template's Dockerfile replaces the context's; links are kept
// as links; the digest is the content's, not the files' times; a context
// over the cap is refused before it is read; a FIFO is refused.
func TestPack(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM the-context's-own\n"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "sub", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "link")))
	p1, err := Pack(dir, []byte("FROM x\n"), 1<<20)
	must(err)
	es := entries(t, p1.Tar)
	var names []string
	for n := range es {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "Dockerfile link sub/ sub/run.sh" {
		t.Fatalf("entries %v", names)
	}
	if es["link"].Typeflag != tar.TypeSymlink || es["link"].Linkname != "/etc/passwd" {
		t.Errorf("link: %+v", es["link"])
	}
	if es["sub/run.sh"].Mode != 0o755 {
		t.Errorf("mode %o", es["sub/run.sh"].Mode)
	}
	if es["Dockerfile"].Size != int64(len("FROM x\n")) {
		t.Errorf("the context's own Dockerfile was sent")
	}
	// Touching a file changes the signature, not the digest.
	_, sig1, err := Measure(dir)
	must(err)
	later := time.Now().Add(time.Hour)
	must(os.Chtimes(filepath.Join(dir, "sub", "run.sh"), later, later))
	_, sig2, _ := Measure(dir)
	p2, err := Pack(dir, []byte("FROM x\n"), 1<<20)
	must(err)
	if sig1 == sig2 || p1.Digest != p2.Digest {
		t.Errorf("signature %v→%v (want changed), digest %v→%v (want same)", sig1[:8], sig2[:8], p1.Digest[:8], p2.Digest[:8])
	}
	must(os.WriteFile(filepath.Join(dir, "sub", "run.sh"), []byte("#!/bin/sh\necho changed\n"), 0o755))
	if p3, _ := Pack(dir, []byte("FROM x\n"), 1<<20); p3.Digest == p1.Digest {
		t.Errorf("a changed file kept the digest")
	}
	must(os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o644))
	var tooLarge *ContextTooLargeError
	if _, err := Pack(dir, []byte("FROM x\n"), 1<<20); !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "nothing was sent") {
		t.Errorf("over the cap: %v", err)
	}
	must(os.Remove(filepath.Join(dir, "big")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	if _, err := Pack(dir, []byte("FROM x\n"), 1<<20); err == nil || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("a FIFO: %v", err)
	}
}

// seedContext puts a workspace's files under files/, leaves out caches,
// devices and setuid bits, and refuses files over the cap.
func TestSeedContext(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	add := func(h tar.Header, body string) {
		h.Size = int64(len(body))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	add(tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}, "")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./notes/data.txt", Mode: 0o4755}, "kept\n")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./.cache/pip/blob", Mode: 0o644}, "cache")
	add(tar.Header{Typeflag: tar.TypeSymlink, Name: "./l", Linkname: "/etc"}, "")
	add(tar.Header{Typeflag: tar.TypeChar, Name: "./dev", Mode: 0o644}, "")
	tw.Close()
	out, n, err := seedContext("root:1", bytes.NewReader(in.Bytes()), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	es := entries(t, out)
	if _, ok := es["files/notes/data.txt"]; !ok || n != 5 {
		t.Fatalf("entries %v, %d bytes", es, n)
	}
	if es["files/notes/data.txt"].Mode != 0o755 {
		t.Errorf("setuid kept: %o", es["files/notes/data.txt"].Mode)
	}
	for _, gone := range []string{"files/.cache/pip/blob", "files/dev"} {
		if _, ok := es[gone]; ok {
			t.Errorf("%s was kept", gone)
		}
	}
	if es["files/l"] == nil || es["files/l"].Linkname != "/etc" {
		t.Errorf("link: %v", es["files/l"])
	}
	if _, _, err := seedContext("root:1", bytes.NewReader(in.Bytes()), 3); err == nil {
		t.Errorf("files over the cap were packed")
	}
}
