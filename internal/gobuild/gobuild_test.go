package gobuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

func TestBuilderArgs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // "" = refused
	}{
		{"test ./...", "test -count=1 -exec /bin/true ./..."},
		{"test -count=1 -run TestX -v ./...", "test -count=1 -exec /bin/true ./..."},
		{"test", "test -count=1 -exec /bin/true"},
		{"build -trimpath -o /tmp/x/main .", "build -o /dev/null -trimpath ."},
		{"build -tags netgo,osusergo ./cmd/x", "build -o /dev/null -tags=netgo,osusergo ./cmd/x"},
		{"vet -printf=false github.com/a/b/...", "vet github.com/a/b/..."},
		// What could run code or write elsewhere is never passed on.
		{"test -toolexec /tmp/evil ./...", "test -count=1 -exec /bin/true ./..."},
		{"test -exec=/tmp/evil -ldflags=-X=a.b=c -gcflags all=-N ./...", "test -count=1 -exec /bin/true ./..."},
		{"build -overlay /tmp/o.json -modfile=/tmp/go.mod .", "build -o /dev/null ."},
		{"test ./... -args -toolexec /tmp/evil", "test -count=1 -exec /bin/true ./..."},
		{"test -tags $(evil) .", ""},
		{"build main.go", ""},
		{"test ./a;rm", ""},
		{"-C /tmp test", ""},
		{"run .", ""},
		{"generate ./...", ""},
		{"build -C /tmp .", ""},
	} {
		got, err := builderArgs(strings.Fields(c.in))
		if c.want == "" {
			if err == nil {
				t.Errorf("%q: got %q, want refused", c.in, got)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := builderArgs(slices.Repeat([]string{"test"}, proto.MaxGoBuildArgs+1)); err == nil {
		t.Error("too many arguments accepted")
	}
}

type entry struct {
	name string
	typ  byte
	body string
	link string
}

func tgz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: e.typ, Size: int64(len(e.body)), Mode: 0o644, Linkname: e.link}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestCheck(t *testing.T) {
	good := tgz(t, entry{name: "pkg/", typ: tar.TypeDir}, entry{name: "go.mod", typ: tar.TypeReg, body: "module m\n"},
		entry{name: "pkg/a.go", typ: tar.TypeReg, body: "package pkg\n"})
	b, err := Check(proto.GoBuild{Root: "/tmp/m", Dir: "/tmp/m/pkg", Args: []string{"test", "."}, Source: good})
	if err != nil || b.Root != "/tmp/m" || strings.Join(b.Args, " ") != "test -count=1 -exec /bin/true ." {
		t.Fatalf("good build: %+v, %v", b, err)
	}
	for name, gb := range map[string]proto.GoBuild{
		"dir outside root":  {Root: "/tmp/m", Dir: "/tmp/mx", Args: []string{"test"}, Source: good},
		"relative root":     {Root: "tmp/m", Dir: "tmp/m", Args: []string{"test"}, Source: good},
		"unclean root":      {Root: "/tmp/../etc", Dir: "/tmp/../etc", Args: []string{"test"}, Source: good},
		"shell in root":     {Root: "/tmp/$(x)", Dir: "/tmp/$(x)", Args: []string{"test"}, Source: good},
		"dot-dot entry":     {Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"test"}, Source: tgz(t, entry{name: "../../go-build-shared/current/00/x-a", typ: tar.TypeReg, body: "v1"})},
		"absolute entry":    {Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"test"}, Source: tgz(t, entry{name: "/go-build-shared/x", typ: tar.TypeReg})},
		"symbolic link":     {Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"test"}, Source: tgz(t, entry{name: "c", typ: tar.TypeSymlink, link: "/go-build-shared/current"})},
		"hard link":         {Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"test"}, Source: tgz(t, entry{name: "c", typ: tar.TypeLink, link: "go.mod"})},
		"not gzip":          {Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"test"}, Source: []byte("plain")},
		"forbidden command": {Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"generate"}, Source: good},
	} {
		if _, err := Check(gb); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTenantKey(t *testing.T) {
	if tenantKey("a") == tenantKey("b") || tenantKey("a") != tenantKey("a") || len(tenantKey("a")) != 20 {
		t.Error("tenant keys are not one per tenant")
	}
}
