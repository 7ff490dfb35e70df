package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func TestAllBuildOrder(t *testing.T) {
	list := All()
	if len(list) == 0 || list[0].Name != "base" || list[0].Base != "" {
		t.Fatalf("All()[0] = %+v, want the base image first", list)
	}
	seen := map[string]bool{}
	for _, im := range list {
		if seen[im.Name] {
			t.Errorf("image %q listed twice", im.Name)
		}
		if im.Base != "" && !seen[im.Base] {
			t.Errorf("image %q is listed before its parent %q", im.Name, im.Base)
		}
		seen[im.Name] = true
		if got, ok := Lookup(im.Name); !ok || got != im {
			t.Errorf("Lookup(%q) = %+v, %v", im.Name, got, ok)
		}
	}
	for _, want := range []string{"base", "python", "javascript", "go", "rust"} {
		if !seen[want] {
			t.Errorf("image %q missing from All()", want)
		}
	}
	// All returns a copy.
	list[0].Name = "changed"
	if All()[0].Name != "base" {
		t.Error("All() exposes the package's slice")
	}
}

func TestDockerfilesPresent(t *testing.T) {
	for _, im := range All() {
		tarball, err := ContextTar(im.Name)
		if err != nil {
			t.Fatalf("ContextTar(%q): %v", im.Name, err)
		}
		files := tarFiles(t, tarball)
		df, ok := files["Dockerfile"]
		if !ok {
			t.Fatalf("%s: no Dockerfile in context (have %v)", im.Name, files)
		}
		from := ""
		for _, line := range strings.Split(df, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
				from = f[1]
				break
			}
		}
		if im.Base == "" {
			if from != BaseRef {
				t.Errorf("%s: FROM %q, want %q", im.Name, from, BaseRef)
			}
		} else {
			if from != "${"+BaseImageArg+"}" {
				t.Errorf("%s: FROM %q, want ${%s}", im.Name, from, BaseImageArg)
			}
			if !strings.Contains(df, "ARG "+BaseImageArg) {
				t.Errorf("%s: no ARG %s", im.Name, BaseImageArg)
			}
		}
		// Every image must end as the unprivileged user.
		lastUser := ""
		for _, line := range strings.Split(df, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && strings.EqualFold(f[0], "USER") {
				lastUser = f[1]
			}
		}
		if lastUser != "1000:1000" {
			t.Errorf("%s: last USER is %q, want 1000:1000", im.Name, lastUser)
		}
	}
}

func TestContextTarDeterministic(t *testing.T) {
	for _, im := range All() {
		a, err := ContextTar(im.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ContextTar(im.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two ContextTar calls differ", im.Name)
		}
		tr := tar.NewReader(bytes.NewReader(a))
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(fixedTime) || hdr.Uname != "" {
				t.Errorf("%s: %s: uid %d gid %d uname %q mtime %v", im.Name, hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.ModTime)
			}
		}
	}
	if _, err := ContextTar("nope"); err == nil {
		t.Error("ContextTar of an unknown image: no error")
	}
}

func TestContextTarSortedAndStable(t *testing.T) {
	// The same files give the same bytes, whatever order they were created in;
	// a changed file changes the bytes.
	mk := func(df string) fstest.MapFS {
		return fstest.MapFS{
			"x/z.txt":      {Data: []byte("z"), Mode: 0o600},
			"x/Dockerfile": {Data: []byte(df), Mode: 0o755},
			"x/a/b.txt":    {Data: []byte("b")},
		}
	}
	a, err := contextTar(mk("FROM scratch\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := contextTar(mk("FROM scratch\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("same files, different tar bytes")
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
		if hdr.Typeflag == tar.TypeReg && hdr.Mode != 0o644 {
			t.Errorf("%s: mode %o, want 644", hdr.Name, hdr.Mode)
		}
	}
	if got, want := strings.Join(names, " "), "Dockerfile a/ a/b.txt z.txt"; got != want {
		t.Errorf("tar entries %q, want %q", got, want)
	}
	c, err := contextTar(mk("FROM scratch\nRUN true\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, c) {
		t.Error("changed Dockerfile, same tar bytes")
	}
	if _, err := contextTar(fstest.MapFS{"y/readme": {Data: []byte("x")}}, "y"); err == nil {
		t.Error("context without a Dockerfile: no error")
	}
}

func TestHash(t *testing.T) {
	hexRE := regexp.MustCompile(`^[0-9a-f]{12}$`)
	seen := map[string]string{}
	for _, im := range All() {
		h := Hash(im.Name)
		if !hexRE.MatchString(h) {
			t.Errorf("Hash(%q) = %q, want 12 hex digits", im.Name, h)
		}
		if h != Hash(im.Name) {
			t.Errorf("Hash(%q) not stable", im.Name)
		}
		if other, dup := seen[h]; dup {
			t.Errorf("%s and %s share hash %s", im.Name, other, h)
		}
		seen[h] = im.Name
		// The public hash is the content hash over the tar and the parent's hash.
		tarball, _ := ContextTar(im.Name)
		if want := contentHash(tarball, Hash(im.Base)); h != want {
			t.Errorf("Hash(%q) = %s, want %s", im.Name, h, want)
		}
	}
	if Hash("nope") != "" || Tag("nope") != "" {
		t.Error("unknown image has a hash or tag")
	}
}

func TestLanguageHashFollowsBase(t *testing.T) {
	tarball, err := ContextTar("python")
	if err != nil {
		t.Fatal(err)
	}
	h1 := contentHash(tarball, "aaaaaaaaaaaa")
	h2 := contentHash(tarball, "bbbbbbbbbbbb")
	if h1 == h2 {
		t.Error("language image hash does not change when the base hash changes")
	}
	if h1 != contentHash(tarball, "aaaaaaaaaaaa") {
		t.Error("contentHash not deterministic")
	}
	// A changed base context changes the base hash.
	base, _ := ContextTar("base")
	if contentHash(base, "") == contentHash(append(append([]byte{}, base...), 0), "") {
		t.Error("base hash does not follow its context")
	}
}

func TestTags(t *testing.T) {
	tagRE := regexp.MustCompile(`^sandboxer/[a-z0-9]+(?:[._-][a-z0-9]+)*:[0-9a-f]{12}$`)
	for _, im := range All() {
		tag := Tag(im.Name)
		if !tagRE.MatchString(tag) {
			t.Errorf("Tag(%q) = %q is not well-formed", im.Name, tag)
		}
		if repo := Repository(im.Name); repo != "sandboxer/"+im.Name || !strings.HasPrefix(tag, repo+":") {
			t.Errorf("Repository(%q) = %q, tag %q", im.Name, repo, tag)
		}
		if !strings.HasSuffix(tag, ":"+Hash(im.Name)) {
			t.Errorf("Tag(%q) = %q does not end in its hash", im.Name, tag)
		}
	}
}

func tarFiles(t *testing.T, tarball []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = string(data)
	}
}
