package deps_test

import (
	"testing"

	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// run_script's dependencies and install_packages read one grammar per
// manager (lang's table): the same inputs are taken or refused alike by
// both, for every language whose scripts take dependencies.
func TestOneGrammarForBoth(t *testing.T) {
	inputs := []string{
		"requests", "requests==2.31.0", "requests>=2,<3", "requests[socks]>=2", "Django~=4.2", "x===1",
		"is-number", "is-number@7.0.0", "@scope/pkg@^1.2.0", "pkg@>=1 <2", "pkg@1.x||2.x",
		"golang.org/x/text", "golang.org/x/text@v0.14.0", "golang.org/x/text/cmd/x@latest",
		"serde", "serde@1.0", "serde@^1.0",
		"", " x", "-r", "--index-url=http://x", "../x", "/etc/passwd", "https://evil/x.tgz", "git+https://x/y",
		"$(id)", "`id`", "a;b", "x y", "x\ny", "a@file:../x", "golang.org/../x@v1", "requests; rm -rf /",
	}
	for _, language := range []string{"python", "javascript", "typescript", "go", "rust"} {
		l, _ := lang.Builtin(language)
		for _, in := range inputs {
			_, errDeps := deps.Normalise(language, []string{in})
			errInstall := workspace.CheckPackage(l.Dependencies, in)
			if (errDeps == nil) != (errInstall == nil) {
				t.Errorf("%s (%s) %q: run_script's dependencies %v, install_packages %v", language, l.Dependencies, in, errDeps, errInstall)
			}
		}
	}
}
