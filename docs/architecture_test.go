// Package docs holds the project's documentation; its test keeps
// architecture.md true to the code.
package docs

import (
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryPackage: architecture.md lists every package
// under cmd/ and internal/ as "- `path`: <its package comment's first
// sentence>", and nothing that is not a package.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	want := map[string]string{}
	for _, top := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join("..", top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			pkgs, err := parser.ParseDir(token.NewFileSet(), p, func(fi fs.FileInfo) bool {
				return !strings.HasSuffix(fi.Name(), "_test.go")
			}, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				return err
			}
			for _, pkg := range pkgs {
				var comment string
				for _, f := range pkg.Files {
					if f.Doc != nil {
						comment = f.Doc.Text()
					}
				}
				rel, _ := filepath.Rel("..", p)
				want[filepath.ToSlash(rel)] = (&doc.Package{}).Synopsis(comment)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var paths []string
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if want[p] == "" {
			t.Errorf("%s has no package comment", p)
			continue
		}
		if line := "- `" + p + "`: " + want[p]; !strings.Contains(text, line+"\n") {
			t.Errorf("architecture.md lacks the line\n%s", line)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "- `"); ok && (strings.HasPrefix(rest, "cmd/") || strings.HasPrefix(rest, "internal/")) {
			if p, _, _ := strings.Cut(rest, "`"); want[p] == "" {
				t.Errorf("architecture.md names %s, which is no package", p)
			}
		}
	}
}
