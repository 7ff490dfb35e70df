package script

import (
	"testing"

	"github.com/sandboxer/sandboxer/internal/lang"
)

func TestParseCompile(t *testing.T) {
	block := "\x1esandboxer-compile exit=2 ms=41 stdout=3 stderr=5\nout" + "err\n\n" + "\x1esandboxer-compile-end\n"
	c, n, ok := ParseCompile([]byte(block + "program stderr"))
	if !ok || n != len(block) || c.ExitCode != 2 || c.DurationMS != 41 || c.Stdout != "out" || c.Stderr != "err\n\n" {
		t.Fatalf("ParseCompile = %+v, %d, %v", c, n, ok)
	}
	if !CompileFailed([]byte(block[:60])) {
		t.Error("CompileFailed: want true for exit=2 from the header alone")
	}
	for _, bad := range []string{"", "program output\n", "\x1esandboxer-compile exit=x\n", block[:len(block)-3], "\x1esandboxer-compile exit=0 ms=1 stdout=0 stderr=0\nXsandboxer-compile-end\n"} {
		if _, _, ok := ParseCompile([]byte(bad)); ok {
			t.Errorf("ParseCompile(%q) accepted", bad)
		}
	}
	if CompileFailed([]byte("\x1esandboxer-compile exit=0 ms=1 stdout=0 stderr=0\n")) {
		t.Error("CompileFailed: exit=0 is not a failure")
	}
}

func TestDriverPerLanguage(t *testing.T) {
	for _, name := range lang.ScriptNames() {
		rec, ok := lang.Builtin(name)
		l := rec.Script
		if !ok || l.Run == "" || l.File == "" {
			t.Fatalf("%s: %+v", name, l)
		}
		if d := Driver(l, ""); (l.Compiled()) != contains(d, "sandboxer-compile") {
			t.Errorf("%s: driver compile block presence wrong:\n%s", name, d)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A language's prestart is its runner with what the runner reads at start-up.
func TestPrestartOfTheRunner(t *testing.T) {
	rec, _ := lang.Builtin("javascript")
	js := rec.Script
	p := js.Prestart()
	if p == nil || len(p.Argv) != 2 || p.Argv[1] != lang.NodeMain || len(p.EarlyEnv) == 0 {
		t.Fatalf("javascript prestart %+v", p)
	}
	if len(p.LateEnv) != 1 || p.LateEnv[0] != "NODE_PATH" || !js.MainDeps {
		t.Errorf("javascript's runner re-reads NODE_PATH and does the dependency setup; got %+v, MainDeps %t", p, js.MainDeps)
	}
	if py, _ := lang.Builtin("python"); py.Script.Prestart() != nil {
		t.Error("python has no runner but a prestart")
	}
}
