package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// mdLink is a markdown link's target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// repoPath is a backticked path under one of the repository's folders.
	// goSymbol is a package's name followed by one of its identifiers.
	goSymbol = regexp.MustCompile(`^[a-z0-9]+\.[A-Z]`)
	repoPath = regexp.MustCompile("`((?:cmd|internal|scripts|images|docs|policies|test|deploy|conformance|bench)/[A-Za-z0-9_./-]*)`")
)

// TestDocsNameWhatExists: every relative link in the docs, the README and
// the planners' design notes kept here, and every repository path they
// name in backticks, exists. Paths with placeholders (<id>, *, {…}) are
// patterns, not files, and are left out.
func TestDocsNameWhatExists(t *testing.T) {
	var generated []string // what .gitignore names is made by the build, not kept
	if b, err := os.ReadFile("../.gitignore"); err == nil {
		for _, l := range strings.Fields(string(b)) {
			if l = strings.Trim(l, "/"); !strings.ContainsAny(l, "*") {
				generated = append(generated, l)
			}
		}
	}
	pages, _ := filepath.Glob("*.md")
	pages = append(pages, "../README.md")
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, m[1])
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			p := strings.TrimSuffix(m[1], ".")
			if strings.ContainsAny(p, "<>*{}") || slices.ContainsFunc(generated, func(g string) bool { return p == g || strings.HasPrefix(p, g+"/") }) {
				continue
			}
			if dir, name := filepath.Split(p); goSymbol.MatchString(name) {
				p = filepath.Join(dir, strings.SplitN(name, ".", 2)[0]) // internal/auth.Door: the package
			}
			if _, err := os.Stat(filepath.Join("..", p)); err != nil {
				t.Errorf("%s names %s, which does not exist", page, p)
			}
		}
	}
}
