package fake

import (
	"fmt"
	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/hardening"
	"strconv"
	"strings"
	"time"
)

// op is one statement of a fake script.
type op struct {
	name        string   // echo, printf, sleep, exit, cat, oom, trap, true, false, seq, curl, id, fail
	args        []string // words after the command name (redirection removed)
	stderr      bool     // >&2
	toFile      string   // > FILE or >> FILE: the output goes to the container's files
	append      bool     // >> FILE
	dur         time.Duration
	code        int
	first, last int // seq's range
	// cond: "&&" runs it only after a status of 0, "||" only after
	// another; "" always (the first command of a statement).
	cond string
}

// program is a parsed script plus the directives that act outside the process.
type program struct {
	ops       []op
	hangStart bool // Start blocks until the job's gate is released (or its ctx ends)
	syntaxErr string
}

// scriptOf picks the script out of an argv: the argument of `bash -c` / `sh -c`
// (what the job layer always sends), else the argv joined by spaces.
func scriptOf(cmd []string) string {
	for i := 0; i+1 < len(cmd); i++ {
		if cmd[i] == "-c" {
			return cmd[i+1]
		}
	}
	return strings.Join(cmd, " ")
}

// parse reads a script. Statements are separated by ';' or newlines; '#' starts
// a comment; words are split on blanks with '...' and "..." quoting (no
// expansions). See the package comment for the grammar.
func parse(script string) program {
	var p program
	stmts, err := splitStatements(script)
	if err != nil {
		p.syntaxErr = err.Error()
		return p
	}
	for _, words := range stmts {
		cond := ""
		for len(words) > 0 {
			seg, next := words, ""
			for i, w := range words {
				if w == "&&" || w == "||" {
					seg, next = words[:i], w
					break
				}
			}
			words = words[len(seg):]
			if next != "" {
				words = words[1:]
			}
			if len(seg) == 0 { // "&& b", "a && || b"
				p.syntaxErr = "bash: -c: syntax error near unexpected token `" + next + "'"
				return p
			}
			o, directive := parseOp(seg)
			o.cond, cond = cond, next
			if directive {
				p.hangStart = true
				continue
			}
			p.ops = append(p.ops, o)
		}
		if cond != "" {
			p.syntaxErr = "bash: -c: syntax error: unexpected end of file"
			return p
		}
	}
	return p
}

// parseOp reads one simple command; directive says it is a fake-only
// directive that acts outside the process (hang-start).
func parseOp(words []string) (o op, directive bool) {
	o = op{name: words[0]}
	for i := 1; i < len(words); i++ {
		switch w := words[i]; w {
		case ">&2", "1>&2":
			o.stderr = true
		case ">&1", "2>&1":
		case ">", ">>":
			if i+1 < len(words) {
				o.toFile, o.append = words[i+1], w == ">>"
				i++
			}
		default:
			o.args = append(o.args, w)
		}
	}
	switch o.name {
	case "echo", "printf", "cat", "oom", "true", ":", "false", "trap", "curl":
	case "ignore-term":
		o.name, o.args = "trap", []string{"", "TERM"}
	case "hang-start":
		return o, true
	case "sleep":
		d, ok := parseSleep(o.args)
		if !ok {
			o.name, o.code = "fail", 1
			o.args = []string{fmt.Sprintf("sleep: invalid time interval %q", strings.Join(o.args, " "))}
		}
		o.dur = d
	case "seq":
		// seq FIRST LAST, as coreutils prints it.
		first, err1 := strconv.Atoi(arg(o.args, 0))
		last, err2 := strconv.Atoi(arg(o.args, 1))
		if len(o.args) != 2 || err1 != nil || err2 != nil {
			o.name, o.code = "fail", 1
			o.args = []string{"seq: the fake takes seq FIRST LAST"}
			break
		}
		o.first, o.last = first, last
	case "id":
		if len(o.args) != 1 || (o.args[0] != "-u" && o.args[0] != "-g") {
			o.name, o.code = "fail", 1
			o.args = []string{"id: the fake takes id -u or id -g"}
		}
	case images.SupervisorPath:
		// The supervisor's probe of its own confinement (the fake's kernel).
		if len(o.args) != 1 || o.args[0] != hardening.ProbeCommand {
			o.name, o.code = "fail", 2
			o.args = []string{"sandboxer-supervisor: the fake runs only its probe subcommand"}
			break
		}
		o.name = "probe"
	case "exit":
		o.code = 0
		if len(o.args) > 0 {
			n, err := strconv.Atoi(o.args[0])
			if err != nil {
				n = 2 // bash: numeric argument required
			}
			o.code = n & 0xff
		}
	default:
		o.args = []string{"bash: " + o.name + ": command not found"}
		o.name, o.code = "fail", 127
	}
	return o, false
}

// parseSleep takes seconds ("2", "0.5") or a Go duration ("2s", "150ms").
func parseSleep(args []string) (time.Duration, bool) {
	if len(args) != 1 {
		return 0, false
	}
	if f, err := strconv.ParseFloat(args[0], 64); err == nil && f >= 0 {
		return time.Duration(f * float64(time.Second)), true
	}
	if d, err := time.ParseDuration(args[0]); err == nil && d >= 0 {
		return d, true
	}
	return 0, false
}

// splitStatements splits a script into statements of words.
func splitStatements(s string) ([][]string, error) {
	var (
		stmts   [][]string
		words   []string
		word    strings.Builder
		inWord  bool
		quote   rune
		comment bool
	)
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endStmt := func() {
		endWord()
		stmts = append(stmts, words)
		words = nil
	}
	for _, r := range s {
		switch {
		case comment:
			if r == '\n' {
				comment = false
				endStmt()
			}
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			comment = true
		case r == ';' || r == '\n':
			endStmt()
		case r == ' ' || r == '\t':
			endWord()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("bash: -c: unexpected EOF while looking for matching `%c'", quote)
	}
	endStmt()
	return stmts, nil
}

// signalNumber maps a signal name ("TERM", "SIGTERM", "15") to its number.
func signalNumber(s string) (int, bool) {
	s = strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return n, true
	}
	n, ok := map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "USR1": 10, "SEGV": 11,
		"USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15}[s]
	return n, ok
}

// arg is args[i], or "" past the end.
func arg(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}
