package deps

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestNormaliseAccepts(t *testing.T) {
	for lang, list := range map[string][]string{
		"python":     {"requests", "requests==2.31.0", "Flask[async]>=2,<3", "zope.interface~=6.0", "a_b-c.d"},
		"javascript": {"is-number", "is-number@7.0.0", "@types/node@^20.1", "lodash@latest", "left-pad@>=1.0.0"},
		"typescript": {"is-number@7.0.0"},
		"go":         {"golang.org/x/text@v0.14.0", "github.com/google/uuid@v1.6.0", "gopkg.in/yaml.v3@v3.0.1", "example.com/m@latest"},
		"rust":       {"serde", "serde@1.0", "rand_core@^0.6"},
	} {
		if _, err := Normalise(lang, list); err != nil {
			t.Errorf("%s %v: %v", lang, list, err)
		}
	}
}

func TestNormaliseRefuses(t *testing.T) {
	bad := []string{"requests; touch /tmp/x", "--index-url=http://x", "-r /etc/passwd", "../x", "", " x", "x y",
		"a@file:../x", "https://evil/x.tgz", "$(id)", "x\nY", "`id`", "-e.", "/etc/passwd"}
	for _, lang := range []string{"python", "javascript", "typescript", "go", "rust"} {
		for _, b := range bad {
			ok := "ok"
			if lang == "go" {
				ok = "golang.org/x/text@v0.14.0"
			}
			_, err := Normalise(lang, []string{ok, b})
			if err == nil {
				t.Errorf("%s accepted %q", lang, b)
				continue
			}
			if !strings.Contains(err.Error(), "dependencies[1]") {
				t.Errorf("%s %q: error %q does not name dependencies[1]", lang, b, err)
			}
		}
	}
	for _, b := range []string{"golang.org/../x@v1.0.0", "text@v1.0.0", "golang.org/x/a..b@v1"} {
		if _, err := Normalise("go", []string{b}); err == nil {
			t.Errorf("go accepted %q", b)
		}
	}
	// The one grammar (lang's, install_packages' too): a version is optional.
	for _, g := range []string{"golang.org/x/text", "golang.org/x/text@master", "golang.org/x/text@latest"} {
		if _, err := Normalise("go", []string{g}); err != nil {
			t.Errorf("go refused %q: %v", g, err)
		}
	}
	if _, err := Normalise("bash", []string{"x"}); err == nil || !strings.Contains(err.Error(), "dependencies") {
		t.Errorf("bash took dependencies: %v", err)
	}
	long := make([]string, MaxEntries+1)
	for i := range long {
		long[i] = "x"
	}
	if _, err := Normalise("python", long); err == nil {
		t.Error("too many entries accepted")
	}
	if _, err := Normalise("python", []string{strings.Repeat("a", MaxEntryBytes+1)}); err == nil {
		t.Error("too long an entry accepted")
	}
}

func TestNormaliseSortsAndKeys(t *testing.T) {
	a, _ := Normalise("javascript", []string{"b", "a@1.0.0", "b"})
	if !slices.Equal(a, []string{"a@1.0.0", "b"}) {
		t.Fatalf("normalised %v", a)
	}
	b, _ := Normalise("javascript", []string{"a@1.0.0", "b"})
	if Key("javascript", "img", a) != Key("javascript", "img", b) {
		t.Error("same list, different keys")
	}
	if Key("javascript", "img", a) == Key("javascript", "img2", a) || Key("javascript", "img", a) == Key("typescript", "img", a) {
		t.Error("key ignores the image or the language")
	}
	if Key("python", "i", []string{"ab"}) == Key("python", "i", []string{"a", "b"}) {
		t.Error("key is ambiguous")
	}
}

func TestInstallScript(t *testing.T) {
	for _, lang := range []string{"python", "javascript", "go"} {
		s, err := InstallScript(lang, "")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(s, `-- "$@"`) {
			t.Errorf("%s: the list does not follow --:\n%s", lang, s)
		}
	}
	s, _ := InstallScript("python", "http://172.17.0.1:8080/simple/")
	if !strings.Contains(s, "--index-url 'http://172.17.0.1:8080/simple/' --trusted-host '172.17.0.1'") {
		t.Errorf("index not passed:\n%s", s)
	}
	if _, err := InstallScript("rust", ""); err == nil || !strings.Contains(err.Error(), "crates.io") {
		t.Errorf("rust install: %v", err)
	}
}

// The javascript image's runner does Setup's work for a script with
// dependencies (script.Language.MainDeps): it must check the same marker.
func TestRunnerChecksTheCompleteMarker(t *testing.T) {
	b, err := os.ReadFile("../../images/javascript/script-main.js")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "'/"+completeMarker+"'") {
		t.Errorf("script-main.js does not check %s", completeMarker)
	}
	if !strings.Contains(Setup("javascript"), "/node_modules node_modules") || !strings.Contains(string(b), "'/node_modules'") {
		t.Error("the driver's setup and the runner no longer both link node_modules beside the source")
	}
}
