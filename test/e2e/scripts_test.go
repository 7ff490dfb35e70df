package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// scriptHello is a hello world per run_script language that also echoes its
// first argument and its first line of stdin.
var scriptHello = map[string]string{
	"bash":       "read -r line; echo \"hello from bash $1 $line\"",
	"python":     "import sys\nline = sys.stdin.readline().strip()\nprint('hello from python', sys.argv[1], line)",
	"javascript": "const line = require('fs').readFileSync(0, 'utf8').split('\\n')[0];\nconsole.log('hello from javascript', process.argv[2], line);",
	"typescript": "import { readFileSync } from 'node:fs';\nconst line: string = readFileSync(0, 'utf8').split('\\n')[0];\nconst who: string = process.argv[2];\nconsole.log(`hello from typescript ${who} ${line}`);",
	"go":         "package main\n\nimport (\n\t\"bufio\"\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tline, _ := bufio.NewReader(os.Stdin).ReadString('\\n')\n\tfmt.Println(\"hello from go\", os.Args[1], line[:len(line)-1])\n}\n",
	"rust":       "use std::io::BufRead;\nfn main() {\n    let arg = std::env::args().nth(1).unwrap();\n    let mut line = String::new();\n    std::io::stdin().lock().read_line(&mut line).unwrap();\n    println!(\"hello from rust {} {}\", arg, line.trim_end());\n}\n",
}

func TestScriptHelloEachLanguage(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, lang := range []string{"bash", "python", "javascript", "typescript", "go", "rust"} {
		t.Run(lang, func(t *testing.T) {
			r := s.ok("run_script", map[string]any{
				"language": lang, "code": scriptHello[lang], "args": []string{"ARG1 with space"},
				"stdin": "first line\nsecond\n", "timeout_s": 120, "wait_s": 50,
			})
			want := "hello from " + lang + " ARG1 with space first line\n"
			if str(r, "status") != "completed" || str(r, "stdout") != want {
				t.Fatalf("run_script %s: want completed with %q, got %v", lang, want, r)
			}
			if str(r, "language_version") == "" {
				t.Errorf("run_script %s: no language_version: %v", lang, r)
			}
			compiled := lang == "go" || lang == "rust" || lang == "typescript"
			c, _ := r["compile"].(map[string]any)
			if compiled != (c != nil) {
				t.Errorf("run_script %s: compile = %v, want it present only for compiled languages", lang, r["compile"])
			}
			if c != nil && (num(t, c, "exit_code") != 0 || str(r, "stderr") != "") {
				t.Errorf("run_script %s: compile %v, stderr %q: want exit 0 and no compile block left in stderr", lang, c, str(r, "stderr"))
			}
			// The source and args are kept with the job.
			id := str(r, "job_id")
			j := s.ok("get_job", map[string]any{"job_id": id})
			sc, _ := j["script"].(map[string]any)
			if j["kind"] != "script" || sc == nil || str(sc, "source") != scriptHello[lang] {
				t.Errorf("get_job %s: want kind script with the source, got %v", lang, j)
			}
			if u, _ := r["usage"].(map[string]any); u == nil || num(t, u, "wall_ms") <= 0 {
				t.Errorf("run_script %s: no usage: %v", lang, r)
			}
		})
	}
	lj := s.ok("list_jobs", map[string]any{"kind": "script", "limit": 50})
	if jobs, _ := lj["jobs"].([]any); len(jobs) != 6 {
		t.Errorf("list_jobs kind script: want 6 jobs, got %d", len(jobs))
	}
}

func TestScriptCompileErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	cases := map[string]struct{ code, msg string }{
		"go":         {"package main\n\nfunc main() {\n\tfmt.Println(\"x\"\n}\n", "syntax error"},
		"rust":       {"fn main() {\n    let x = ;\n}\n", "error"},
		"typescript": {"const x: number = ;\nconsole.log(x);\n", "ERROR"},
		"solidity":   {"pragma solidity ^0.8.0;\ncontract C {\n  function f() public { uint x = ; }\n}\n", "ParserError"},
	}
	for lang, c := range cases {
		t.Run(lang, func(t *testing.T) {
			r := s.ok("run_script", map[string]any{"language": lang, "code": c.code, "timeout_s": 120, "wait_s": 50})
			comp, _ := r["compile"].(map[string]any)
			if str(r, "status") != "failed" || str(r, "reason") != "compile_error" || comp == nil {
				t.Fatalf("%s: want failed/compile_error with compile, got %v", lang, r)
			}
			if num(t, comp, "exit_code") == 0 || !strings.Contains(str(comp, "stderr")+str(comp, "stdout"), c.msg) {
				t.Errorf("%s: compile %v: want a non-zero exit and %q in the compiler's messages", lang, comp, c.msg)
			}
			j := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
			if str(j, "reason") != "compile_error" {
				t.Errorf("%s: get_job reason %q, want compile_error", lang, str(j, "reason"))
			}
		})
	}
}

const counterSol = `// SPDX-License-Identifier: MIT
pragma solidity ^0.8.0;
contract Counter {
    uint256 private n;
    event Incremented(address indexed by, uint256 value);
    function inc() public { n += 1; emit Incremented(msg.sender, n); }
    function get() public view returns (uint256) { return n; }
}
`

func TestScriptSolidityCounter(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_script", map[string]any{"language": "solidity", "code": counterSol,
		"args": []string{"Counter", "inc()", "inc()", "get()"}, "timeout_s": 120, "wait_s": 50})
	out := str(r, "stdout")
	if str(r, "status") != "completed" || !strings.Contains(out, "get() -> 2") || !strings.Contains(out, "event Incremented(") {
		t.Fatalf("solidity Counter: want get() -> 2 and the events, got %v", r)
	}
	if c, _ := r["compile"].(map[string]any); c == nil || num(t, c, "exit_code") != 0 {
		t.Errorf("solidity: compile %v", r["compile"])
	}
	r = s.ok("run_script", map[string]any{"language": "solidity", "code": counterSol, "timeout_s": 120, "wait_s": 50})
	if out := str(r, "stdout"); !strings.Contains(out, "contract Counter: bytecode") || !strings.Contains(out, "abi: [") {
		t.Errorf("solidity without args: want ABI and sizes, got %q", out)
	}
	// The source resource returns the code.
	if got := s.readResource("job://" + str(r, "job_id") + "/source"); got != counterSol {
		t.Errorf("job://{id}/source = %q, want the source", got)
	}
}

func TestScriptEnvAndEnvFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	envFile := filepath.Join(dir, "app.env")
	if err := os.WriteFile(envFile, []byte("# comment\nexport FROM_FILE=file\nBOTH=file\nLANG=from-file\nMULTI=\"line one\nline two\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, policyEnv(t, "scripts:\n  env_file_dirs: ["+dir+"]\n"))
	code := "import os\nfor k in ['FROM_FILE', 'BOTH', 'LANG', 'MULTI', 'HOME']:\n    print(k + '=' + repr(os.environ.get(k)))\n"
	r := s.ok("run_script", map[string]any{"language": "python", "code": code, "env_file": envFile, "env": map[string]string{"BOTH": "env"}})
	want := "FROM_FILE='file'\nBOTH='env'\nLANG='from-file'\nMULTI='line one\\nline two'\nHOME='/home/sandbox'\n"
	if str(r, "stdout") != want {
		t.Errorf("env precedence: want %q, got %q (%v)", want, str(r, "stdout"), r)
	}
	other := filepath.Join(t.TempDir(), "x.env")
	_ = os.WriteFile(other, []byte("A=1\n"), 0o644)
	if msg := s.toolErr("run_script", map[string]any{"language": "python", "code": "print(1)", "env_file": other}); !strings.Contains(msg, "scripts.env_file_dirs") {
		t.Errorf("env_file outside the allowed dirs: %q", msg)
	}
	if msg := s.toolErr("run_script", map[string]any{"language": "python", "code": "print(1)", "env_file": filepath.Join(dir, "..", filepath.Base(filepath.Dir(other)), "x.env")}); !strings.Contains(msg, "env_file") {
		t.Errorf("env_file escaping with ..: %q", msg)
	}
	if msg := s.toolErr("run_script", map[string]any{"language": "python", "code": "print(1)", "env": map[string]string{"LD_PRELOAD": "x"}}); !strings.Contains(msg, "LD_PRELOAD") {
		t.Errorf("LD_PRELOAD: %q", msg)
	}
}

func (s *server) readResource(uri string) string {
	s.t.Helper()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uri
	res, err := s.client.ReadResource(ctxTimeout(s.t, 30*time.Second), req)
	if err != nil || len(res.Contents) != 1 {
		s.t.Fatalf("read %s: %v (%d contents)", uri, err, len(res.Contents))
	}
	tc, _ := res.Contents[0].(mcp.TextResourceContents)
	return tc.Text
}

func TestScriptBenchmark(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("benchmark_script", map[string]any{"language": "python", "code": "print(sum(range(100000)))", "runs": 3})
	runs, _ := r["runs"].([]any)
	if len(runs) != 3 {
		t.Fatalf("benchmark_script runs 3: got %v", r)
	}
	for _, f := range []string{"wall_ms", "cpu_ms", "peak_memory_bytes"} {
		st, _ := r[f].(map[string]any)
		if st == nil || !(num(t, st, "min") <= num(t, st, "median") && num(t, st, "median") <= num(t, st, "max")) || num(t, st, "max") <= 0 {
			t.Errorf("benchmark_script %s: want 0 < min <= median <= max, got %v", f, st)
		}
	}
	msg := s.toolErr("benchmark_script", map[string]any{"language": "python", "code": "import sys; sys.exit(3)", "runs": 2, "warmup": 0})
	if !strings.Contains(msg, "measured run 1") || !strings.Contains(msg, "exit code 3") {
		t.Errorf("failing benchmark: %q", msg)
	}
}
