package e2e

import (
	"strings"
	"testing"
	"time"
)

var fLanguages = []string{"bash", "python", "javascript", "typescript", "go", "rust", "solidity"}

func TestFoundationListLanguages(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("list_languages", map[string]any{})
	if str(r, "engine") != "ok" || str(r, "default") != "bash" {
		t.Errorf("list_languages: want engine ok and default bash, got engine %q default %q", str(r, "engine"), str(r, "default"))
	}
	langs, _ := r["languages"].([]any)
	got := map[string]map[string]any{}
	for _, l := range langs {
		m, _ := l.(map[string]any)
		got[str(m, "name")] = m
	}
	for _, name := range fLanguages {
		m, ok := got[name]
		switch {
		case !ok:
			t.Errorf("list_languages lacks %s; got %v", name, r["languages"])
		case m["built"] != true:
			t.Errorf("list_languages: %s (image %s) is not built: %v", name, str(m, "image"), m)
		case !strings.HasPrefix(str(m, "image"), "sandboxer/"):
			t.Errorf("list_languages: %s maps to image %q, want sandboxer/...", name, str(m, "image"))
		}
	}
	wantVersion := map[string]string{"bash": "GNU bash", "python": "Python 3.", "javascript": "node v", "typescript": "esbuild ", "go": "go version go1.", "rust": "rustc 1.", "solidity": "solc 0.8."}
	for name, prefix := range wantVersion {
		if v := str(got[name], "version"); !strings.HasPrefix(v, prefix) {
			t.Errorf("list_languages: %s version %q, want it to start with %q", name, v, prefix)
		}
	}
}

func TestFoundationLanguagesRun(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	// Compilers get more time, memory and both cores of this small machine.
	build := map[string]any{"timeout_s": 120, "memory_mb": 1024, "cpus": 2}
	cases := []struct {
		language, command, want string
		args                    map[string]any
	}{
		{"bash", `echo $((2+3))`, "5\n", nil},
		{"python", `python3 -c 'print(1+1)'`, "2\n", nil},
		{"javascript", `node -e 'console.log(6*7)'`, "42\n", nil},
		{"typescript", `printf 'const n: number = 6 * 7;\nconsole.log(n);\n' > hello.ts && tsc hello.ts && node hello.js`, "42\n", build},
		{"go", `printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from go") }\n' > main.go && go run main.go`, "hello from go\n", build},
		{"rust", `printf 'fn main() { println!("hello from rust"); }\n' > hello.rs && rustc hello.rs -o /tmp/hello && /tmp/hello`, "hello from rust\n", build},
	}
	for _, tc := range cases {
		args := map[string]any{"language": tc.language, "command": tc.command}
		for k, v := range tc.args {
			args[k] = v
		}
		start := time.Now()
		r := fRun(s, args)
		t.Logf("%s: %s in %s", tc.language, str(r, "status"), time.Since(start).Round(100*time.Millisecond))
		if str(r, "status") != "completed" || str(r, "stdout") != tc.want {
			t.Errorf("%s: want completed with stdout %q, got status %q reason %q exit %v\nstdout: %s\nstderr: %s",
				tc.language, tc.want, str(r, "status"), str(r, "reason"), r["exit_code"], fShort(str(r, "stdout")), fShort(str(r, "stderr")))
		}
	}
	s.waitNoContainers(10 * time.Second)
}
