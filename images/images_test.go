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
		for kind, h := range map[string]string{"final": Hash(im.Name), "core": CoreHash(im.Name)} {
			if !hexRE.MatchString(h) {
				t.Errorf("%s hash of %q = %q, want 12 hex digits", kind, im.Name, h)
			}
			if other, dup := seen[h]; dup {
				t.Errorf("%s %s and %s share hash %s", kind, im.Name, other, h)
			}
			seen[h] = im.Name
		}
		if Hash(im.Name) != Hash(im.Name) || CoreHash(im.Name) != CoreHash(im.Name) {
			t.Errorf("hashes of %q not stable", im.Name)
		}
		// The core hash is over the context tar and the parent's core hash.
		tarball, _ := ContextTar(im.Name)
		if h, want := CoreHash(im.Name), coreHash(tarball, CoreHash(im.Base)); h != want {
			t.Errorf("CoreHash(%q) = %s, want %s", im.Name, h, want)
		}
		// The final hash is over the final context: core tag and supervisor.
		final, err := finalContextTar(CoreTag(im.Name), Supervisor())
		if err != nil {
			t.Fatal(err)
		}
		if h, want := Hash(im.Name), finalHash(final); h != want {
			t.Errorf("Hash(%q) = %s, want %s", im.Name, h, want)
		}
	}
	if Hash("nope") != "" || Tag("nope") != "" || CoreHash("nope") != "" || CoreTag("nope") != "" {
		t.Error("unknown image has a hash or tag")
	}
}

func TestLanguageHashFollowsBase(t *testing.T) {
	tarball, err := ContextTar("python")
	if err != nil {
		t.Fatal(err)
	}
	h1 := coreHash(tarball, "aaaaaaaaaaaa")
	h2 := coreHash(tarball, "bbbbbbbbbbbb")
	if h1 == h2 {
		t.Error("language image hash does not change when the base hash changes")
	}
	if h1 != coreHash(tarball, "aaaaaaaaaaaa") {
		t.Error("coreHash not deterministic")
	}
	// A changed base context changes the base hash.
	base, _ := ContextTar("base")
	if coreHash(base, "") == coreHash(append(append([]byte{}, base...), 0), "") {
		t.Error("base hash does not follow its context")
	}
	// A changed core tag changes the final hash.
	a, _ := finalContextTar("sandboxer/python-core:aaaaaaaaaaaa", []byte("sup"))
	b, _ := finalContextTar("sandboxer/python-core:bbbbbbbbbbbb", []byte("sup"))
	if finalHash(a) == finalHash(b) {
		t.Error("final hash does not follow the core tag")
	}
}

func TestSupervisorChangesOnlyFinalHashes(t *testing.T) {
	a1, err := computeHashes(contexts, []byte("supervisor v1"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := computeHashes(contexts, []byte("supervisor v1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := computeHashes(contexts, []byte("supervisor v2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range All() {
		if a1.core[im.Name] != a2.core[im.Name] || a1.final[im.Name] != a2.final[im.Name] {
			t.Errorf("%s: hashes not deterministic", im.Name)
		}
		if a1.core[im.Name] != b.core[im.Name] {
			t.Errorf("%s: core hash changed with the supervisor", im.Name)
		}
		if a1.core[im.Name] != CoreHash(im.Name) {
			t.Errorf("%s: core hash %s depends on the supervisor (embedded gives %s)", im.Name, a1.core[im.Name], CoreHash(im.Name))
		}
		if a1.final[im.Name] == b.final[im.Name] {
			t.Errorf("%s: final hash did not change with the supervisor", im.Name)
		}
	}
}

func TestSupervisorFrom(t *testing.T) {
	readme := &fstest.MapFile{Data: []byte("# readme\n")}
	if got := supervisorFrom(fstest.MapFS{"supervisor/README.md": readme}); got != nil {
		t.Errorf("no binary: got %q, want nil", got)
	}
	if got := supervisorFrom(fstest.MapFS{"supervisor/README.md": readme, "supervisor/" + SupervisorFile: {}}); got != nil {
		t.Errorf("empty binary: got %q, want nil", got)
	}
	fs := fstest.MapFS{"supervisor/README.md": readme, "supervisor/" + SupervisorFile: {Data: []byte("\x7fELF fake")}}
	if got := string(supervisorFrom(fs)); got != "\x7fELF fake" {
		t.Errorf("got %q", got)
	}
	// The real embed always has the README, so the pattern matches.
	if _, err := supervisorDir.ReadFile("supervisor/README.md"); err != nil {
		t.Errorf("images/supervisor/README.md not embedded: %v", err)
	}
	// Plan refuses exactly when nothing is embedded.
	if _, err := Plan(); (err != nil) != (Supervisor() == nil) {
		t.Errorf("Plan() error %v with supervisor embedded = %v", err, Supervisor() != nil)
	} else if err != nil && !strings.Contains(err.Error(), "built without the sandbox supervisor: build it with `make build`") {
		t.Errorf("Plan() error %q", err)
	}
}

func TestPlan(t *testing.T) {
	fake := []byte("#!/bin/sh\nexit 0\n")
	builds, err := PlanWith(fake)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := computeHashes(contexts, fake)
	list := All()
	if len(builds) != 2*len(list) {
		t.Fatalf("%d builds, want %d", len(builds), 2*len(list))
	}
	coreTags := map[string]string{}
	for i, im := range list {
		core, final := builds[2*i], builds[2*i+1]
		if core.Image != im.Name || core.Final || final.Image != im.Name || !final.Final {
			t.Fatalf("builds %d,%d = %s/%v, %s/%v; want %s core then final", 2*i, 2*i+1, core.Image, core.Final, final.Image, final.Final, im.Name)
		}
		if core.Tag != CoreTag(im.Name) {
			t.Errorf("%s: core tag %s, want %s", im.Name, core.Tag, CoreTag(im.Name))
		}
		if final.Tag != Repository(im.Name)+":"+want.final[im.Name] {
			t.Errorf("%s: final tag %s, want hash %s", im.Name, final.Tag, want.final[im.Name])
		}
		coreTags[im.Name] = core.Tag
		ctx, _ := ContextTar(im.Name)
		if !bytes.Equal(core.Context, ctx) {
			t.Errorf("%s: core context is not ContextTar", im.Name)
		}
		if im.Base == "" {
			if len(core.BuildArgs) != 0 {
				t.Errorf("%s: build args %v, want none", im.Name, core.BuildArgs)
			}
		} else if got := core.BuildArgs[BaseImageArg]; got != coreTags[im.Base] || len(core.BuildArgs) != 1 {
			t.Errorf("%s: build args %v, want %s=%s", im.Name, core.BuildArgs, BaseImageArg, coreTags[im.Base])
		}
		if len(final.BuildArgs) != 0 {
			t.Errorf("%s: final build args %v", im.Name, final.BuildArgs)
		}
		// The final context: the two-line Dockerfile and the supervisor, 0755, root's.
		tr := tar.NewReader(bytes.NewReader(final.Context))
		var names []string
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, hdr.Name)
			data, _ := io.ReadAll(tr)
			if hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(fixedTime) {
				t.Errorf("%s: %s: uid %d gid %d mtime %v", im.Name, hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime)
			}
			switch hdr.Name {
			case "Dockerfile":
				if w := "FROM " + core.Tag + "\nCOPY root/ /\n"; string(data) != w {
					t.Errorf("%s: final Dockerfile %q, want %q", im.Name, data, w)
				}
			case "root" + SupervisorPath:
				if hdr.Mode != 0o755 || !bytes.Equal(data, fake) {
					t.Errorf("%s: supervisor mode %o, %q", im.Name, hdr.Mode, data)
				}
			case "root/home/user": // E2B's home, a link to /workspace
				if hdr.Typeflag != tar.TypeSymlink || hdr.Linkname != "/workspace" {
					t.Errorf("%s: home/user is type %c, a link to %q", im.Name, hdr.Typeflag, hdr.Linkname)
				}
			}
		}
		if strings.Join(names, " ") != "Dockerfile root/ root/usr/ root/usr/local/ root/usr/local/bin/ root/usr/local/bin/sandboxer-supervisor root/home/ root/home/user" {
			t.Errorf("%s: final context %v", im.Name, names)
		}
	}
}

func TestTags(t *testing.T) {
	tagRE := regexp.MustCompile(`^sandboxer/[a-z0-9]+(?:[._-][a-z0-9]+)*:[0-9a-f]{12}$`)
	for _, im := range All() {
		tag, core := Tag(im.Name), CoreTag(im.Name)
		if !tagRE.MatchString(tag) || !tagRE.MatchString(core) {
			t.Errorf("Tag(%q) = %q or CoreTag = %q is not well-formed", im.Name, tag, core)
		}
		if repo := Repository(im.Name); repo != "sandboxer/"+im.Name || !strings.HasPrefix(tag, repo+":") {
			t.Errorf("Repository(%q) = %q, tag %q", im.Name, repo, tag)
		}
		if repo := CoreRepository(im.Name); repo != "sandboxer/"+im.Name+"-core" || !strings.HasPrefix(core, repo+":") {
			t.Errorf("CoreRepository(%q) = %q, core tag %q", im.Name, repo, core)
		}
		if !strings.HasSuffix(tag, ":"+Hash(im.Name)) || !strings.HasSuffix(core, ":"+CoreHash(im.Name)) {
			t.Errorf("Tag(%q) = %q or CoreTag = %q does not end in its hash", im.Name, tag, core)
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
