package blocklist

import (
	"errors"
	"strings"
	"testing"
)

var testList = map[string]Entry{
	"rm":   {Command: "rm", Reason: "no deleting", Source: SourcePolicy},
	"curl": {Command: "curl", Source: SourceAgent},
}

// Every bypass form of docs/threats.md item 30, and more.
var blockedCases = []struct{ name, script string }{
	{"plain", "rm -rf /tmp/x"},
	{"absolute path", "/usr/bin/rm -rf /tmp/x"},
	{"bin path", "/bin/rm x"},
	{"dot slash", "./rm x"},
	{"relative path", "../../bin/rm x"},
	{"single quotes", "'rm' x"},
	{"split quotes", "'r'm x"},
	{"double quotes", `"rm" x`},
	{"mixed quotes", `r"m" x`},
	{"backslash", `r\m x`},
	{"leading backslash", `\rm x`},
	{"ansi-c quoting", `$'\x72m' x`},
	{"ansi-c octal", `$'\162\155' x`},
	{"command substitution", "echo $(rm x)"},
	{"nested substitution", "echo $(echo $(rm x))"},
	{"backticks", "echo `rm x`"},
	{"process substitution", "cat <(rm x)"},
	{"arithmetic substitution", "echo $(( $(rm x) + 1 ))"},
	{"eval", "eval rm x"},
	{"eval quoted", `eval "rm x"`},
	{"eval split", `eval "r""m x"`},
	{"eval nested", `eval 'eval "rm x"'`},
	{"sh -c", "sh -c 'rm x'"},
	{"bash -c", `bash -c "rm x"`},
	{"bash -ec", "bash -ec 'true; rm x'"},
	{"bash -o pipefail -c", "bash -o pipefail -c 'rm x'"},
	{"nested sh -c", `sh -c "bash -c 'rm x'"`},
	{"dash absolute -c", "/bin/dash -c 'rm x'"},
	{"env", "env rm x"},
	{"env assignments", "env -i FOO=1 BAR=2 rm x"},
	{"env -u", "env -u HOME rm x"},
	{"env -S", "env -S 'rm x'"},
	{"env path", "/usr/bin/env rm x"},
	{"sudo", "sudo rm x"},
	{"sudo -u", "sudo -u root rm x"},
	{"sudo -E --", "sudo -E -- rm x"},
	{"nohup", "nohup rm x &"},
	{"nohup --", "nohup -- rm x"},
	{"timeout", "timeout 5 rm x"},
	{"timeout opts", "timeout -s KILL -k 1 5 rm x"},
	{"timeout long opts", "timeout --signal=KILL 5s rm x"},
	{"xargs", "echo x | xargs rm"},
	{"xargs opts", "find . -print0 | xargs -0 -n 1 -I{} rm {}"},
	{"xargs sh -c", "echo x | xargs sh -c 'rm $0'"},
	{"find -exec", `find . -name x -exec rm {} \;`},
	{"find -exec plus", "find . -exec rm {} +"},
	{"find -execdir", `find . -execdir /bin/rm {} ';'`},
	{"find -exec sh", `find . -exec sh -c 'rm "$1"' _ {} \;`},
	{"command", "command rm x"},
	{"command -p", "command -p rm x"},
	{"exec", "exec rm x"},
	{"exec -a", "exec -a name rm x"},
	{"nice", "nice -n 5 rm x"},
	{"setsid", "setsid rm x"},
	{"stdbuf", "stdbuf -o0 rm x"},
	{"busybox", "busybox rm x"},
	{"wrapper chain", "sudo env FOO=1 nohup timeout 3 nice rm x"},
	{"pipeline left", "rm x | cat"},
	{"pipeline right", "ls | rm x"},
	{"pipeline middle", "ls | rm x | cat"},
	{"newline", "echo hi\nrm x"},
	{"semicolon", "echo hi; rm x"},
	{"and list", "true && rm x"},
	{"or list", "false || rm x"},
	{"background", "rm x & wait"},
	{"subshell", "(rm x)"},
	{"group", "{ rm x; }"},
	{"function", "f() { rm x; }; f"},
	{"function keyword", "function f { rm x; }"},
	{"if", "if true; then rm x; fi"},
	{"while", "while false; do rm x; done"},
	{"for", "for i in 1; do rm $i; done"},
	{"case", "case x in x) rm x;; esac"},
	{"negation", "! rm x"},
	{"time keyword", "time rm x"},
	{"coproc", "coproc rm x"},
	{"assignment prefix", "FOO=bar rm x"},
	{"assignment substitution", "X=$(rm x)"},
	{"export substitution", "export X=$(rm x)"},
	{"local substitution", "f() { local x=$(rm x); }"},
	{"redirect target substitution", "echo hi > $(rm x)"},
	{"test substitution", `[[ -n "$(rm x)" ]]`},
	{"heredoc into bash", "bash <<'EOF'\nrm x\nEOF"},
	{"heredoc into sh unquoted", "sh <<EOF\necho hi\nrm x\nEOF"},
	{"heredoc dash", "sh <<-EOF\n\trm x\n\tEOF"},
	{"here-string into bash", "bash <<< 'rm x'"},
	{"heredoc substitution", "cat <<EOF\n$(rm x)\nEOF"},
	{"echo piped into sh", "echo 'rm x' | sh"},
	{"printf piped into bash", `printf 'rm x\n' | bash`},
	{"cat heredoc piped into sh", "cat <<EOF | sh\nrm x\nEOF"},
	{"sh -s reading stdin", "echo 'rm x' | sh -s"},
	{"brace expansion", "{rm,x}"},
	{"brace in name", "r{m,} x"},
	{"glob name", "/bin/r? x"},
	{"glob class", "/usr/bin/r[m] x"},
	{"glob star", "/usr/bin/r* x"},
	{"IFS splitting", "rm${IFS}x"},
	{"IFS plain", "rm$IFS-rf$IFS/"},
	{"alias", "alias x='rm -rf'; x /"},
	{"su -c", "su -c 'rm x' root"},
	{"watch", "watch -n 1 rm x"},
	{"second rule", "curl http://example.com"},
	{"line continuation", "r\\\nm x"},
	{"comment then command", "# rm\nrm x"},
}

func TestCheckBlocksEveryBypassForm(t *testing.T) {
	for _, tc := range blockedCases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Check(tc.script, testList)
			if err != nil {
				t.Fatalf("Check(%q): %v", tc.script, err)
			}
			if d.Allowed {
				t.Fatalf("Check(%q) allowed; want blocked", tc.script)
			}
			if d.Rule.Command != "rm" && d.Rule.Command != "curl" {
				t.Fatalf("rule %+v", d.Rule)
			}
			if msg := d.Message(); !strings.Contains(msg, "rule \""+d.Rule.Command+"\"") || !strings.Contains(msg, d.Rule.Source) {
				t.Fatalf("message %q does not name the rule and its source", msg)
			}
		})
	}
}

// Look-alikes: the blocked name as data, never as a command.
var allowedCases = []struct{ name, script string }{
	{"echo rm", "echo rm"},
	{"grep rm", "grep rm file"},
	{"quoted arg", "echo 'rm -rf /'"},
	{"rm in a string", `printf '%s\n' "rm x"`},
	{"longer name", "rmdir x"},
	{"prefix name", "arm x"},
	{"suffix name", "rm2 x"},
	{"path component", "/opt/rm/bin/tool x"},
	{"file named rm", "cat rm; ls ./rm"},
	{"variable named rm", "rm=1; echo $rm"},
	{"function named rmx", "rmx() { echo; }; rmx"},
	{"command -v", "command -v rm"},
	{"type", "type rm"},
	{"which", "which rm"},
	{"man", "man rm"},
	{"comment", "echo hi # rm x"},
	{"heredoc into cat", "cat <<EOF\nrm x\nEOF"},
	{"echo piped into grep", "echo 'rm x' | grep rm"},
	{"find without exec", "find . -name rm"},
	{"xargs echo", "echo rm | xargs echo"},
	{"sh -c other", "sh -c 'echo rm'"},
	{"env other", "env FOO=rm ls"},
	{"sudo other", "sudo -u rm ls"},
	{"timeout other", "timeout 5 echo rm"},
	{"case pattern", "case $x in rm) echo;; esac"},
	{"glob not matching", "/bin/l? x"},
	{"assignment value", "X=rm"},
	{"array", "a=(rm x); echo ${a[@]}"},
	{"empty", ""},
	{"for word", "for rm in 1 2; do echo $rm; done"},
}

func TestCheckAllowsLookAlikes(t *testing.T) {
	for _, tc := range allowedCases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Check(tc.script, testList)
			if err != nil {
				t.Fatalf("Check(%q): %v", tc.script, err)
			}
			if !d.Allowed {
				t.Fatalf("Check(%q) blocked: %s", tc.script, d.Message())
			}
		})
	}
}

// What no parser can see gets through: the README says so.
func TestCheckCannotSeeRunTimeNames(t *testing.T) {
	for _, s := range []string{
		"CMD=rm; $CMD x",
		"python3 -c 'import os; os.remove(\"x\")'",
		"echo cm0gLXJmIHgK | base64 -d | sh",
		`sh -c "$SCRIPT"`,
	} {
		d, err := Check(s, testList)
		if err != nil || !d.Allowed {
			t.Errorf("Check(%q) = %+v, %v; documented as out of reach of a parser", s, d, err)
		}
	}
}

func TestCheckRefusesWhatDoesNotParse(t *testing.T) {
	for _, s := range []string{"echo 'unterminated", "if true; then", "sh -c 'echo \"x'", "eval 'a b )'"} {
		_, err := Check(s, testList)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Check(%q) error = %v; want a ParseError", s, err)
		}
	}
	// With an empty list nothing is parsed, so nothing is refused.
	if d, err := Check("echo 'unterminated", nil); err != nil || !d.Allowed {
		t.Errorf("empty list: %+v, %v", d, err)
	}
}

func TestCheckBoundsNesting(t *testing.T) {
	s := "true"
	for i := 0; i < MaxDepth+3; i++ {
		s = "sh -c " + shQuote(s)
	}
	if _, err := Check(s, testList); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("deep nesting: err = %v; want ErrTooDeep", err)
	}
	s = "rm x"
	for i := 0; i < MaxDepth-1; i++ {
		s = "sh -c " + shQuote(s)
	}
	if d, err := Check(s, testList); err != nil || d.Allowed {
		t.Fatalf("nesting within the bound: %+v, %v", d, err)
	}
}

func TestCheckBoundsBraceExpansion(t *testing.T) {
	s := "echo " + strings.Repeat("{a,b}", 12)
	if _, err := Check(s, testList); err == nil {
		t.Fatal("4096-word brace expansion was not refused")
	}
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func TestCheckStdin(t *testing.T) {
	for _, tc := range []struct {
		script, stdin string
		allowed       bool
	}{
		{"bash", "rm x", false},
		{"sh -s", "echo hi; /bin/rm x", false},
		{"bash -c 'cat'", "rm x", true},
		{"grep rm", "rm x", true},
		{"cat", "rm x", true},
		{"bash", "echo rm", true},
	} {
		d, err := CheckStdin(tc.script, tc.stdin, testList)
		if err != nil || d.Allowed != tc.allowed {
			t.Errorf("CheckStdin(%q, %q) = %+v, %v; want allowed=%v", tc.script, tc.stdin, d, err, tc.allowed)
		}
	}
}
