// Package blocklist decides whether a shell script runs a command the
// operator (or, where allowed, an agent) blocked. The decision is made on the
// parsed shell syntax (mvdan.cc/sh/v3/syntax), never on tokens: a blocked
// name is found as any simple command, inside $(...), backticks, process
// substitutions, pipelines, lists, subshells, functions and conditionals;
// after wrappers that run their arguments (env, sudo, nohup, timeout, xargs,
// find -exec, command, exec, nice, setsid, stdbuf, time, busybox, su -c);
// inside the strings given to sh -c / bash -c, to eval and to alias, and in
// heredocs, here-strings and literal echo/printf text piped into a shell
// (parsed recursively, to a bounded depth); through path prefixes, quoting,
// backslashes, ANSI-C $'\x72m' strings, brace expansion, globs such as
// /bin/r? and ${IFS} word splitting.
//
// It is a convenience, not a boundary: what a parser cannot see — code run by
// another interpreter (python -c), encoded text decoded at run time
// (base64 -d | sh), names built from variables ($CMD), downloaded scripts,
// script files written first and run later — gets past it. The container is
// the boundary.
package blocklist

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// MaxDepth bounds how deeply shell strings inside shell strings are parsed.
const MaxDepth = 8

// maxBraceWords bounds brace expansion of one command's words.
const maxBraceWords = 1024

// Entry is one blocked command.
type Entry struct {
	Command string `json:"command"`
	Reason  string `json:"reason,omitempty"`
	Source  string `json:"source"` // SourcePolicy or SourceAgent
}

// Sources of entries.
const (
	SourcePolicy = "policy"
	SourceAgent  = "agent"
)

// Decision is the outcome of a check.
type Decision struct {
	Allowed bool
	// Rule is the entry that matched, when not allowed.
	Rule Entry
	// Found is the command word as written (e.g. /usr/bin/rm, 'r'm), Where
	// says how it was reached (e.g. "inside bash -c", "after env"), Pos is
	// "line:col" in the outermost script.
	Found string
	Where string
	Pos   string
}

// Message is a sentence naming the rule, for tool errors and the audit log.
func (d Decision) Message() string {
	if d.Allowed {
		return "allowed"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "command %q is blocked by the block list (rule %q, from the %s", d.Found, d.Rule.Command, d.Rule.Source)
	if d.Rule.Reason != "" {
		fmt.Fprintf(&b, ": %s", d.Rule.Reason)
	}
	b.WriteString(")")
	if d.Pos != "" {
		fmt.Fprintf(&b, " at %s", d.Pos)
	}
	if d.Where != "" {
		fmt.Fprintf(&b, " (%s)", d.Where)
	}
	return b.String()
}

// ParseError is returned for a script that does not parse: with a non-empty
// list such a script is refused, since it cannot be checked.
type ParseError struct {
	Where string // "" for the script itself, else e.g. "the string given to bash -c"
	Err   error
}

func (e *ParseError) Error() string {
	where := "the script"
	if e.Where != "" {
		where = e.Where
	}
	return fmt.Sprintf("%s does not parse as shell (%v); with a block list in force only scripts that parse can be checked", where, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// ErrTooDeep is returned for shell strings nested deeper than MaxDepth.
var ErrTooDeep = errors.New("shell strings are nested more than 8 levels deep; the block list cannot check them")

// Check reports whether script (a bash script) runs any command in blocked,
// keyed by command name. An empty list allows everything without parsing.
func Check(script string, blocked map[string]Entry) (Decision, error) {
	if len(blocked) == 0 {
		return Decision{Allowed: true}, nil
	}
	c := &checker{blocked: blocked}
	return c.script(script, 0, "", "", nil)
}

// CheckStdin is Check for a script whose standard input is stdin (run_command's
// stdin): a shell at the script's top level that reads its stdin (bash, sh -s)
// runs that text, so it is checked too. Other commands' stdin is data.
func CheckStdin(script, stdin string, blocked map[string]Entry) (Decision, error) {
	if len(blocked) == 0 {
		return Decision{Allowed: true}, nil
	}
	c := &checker{blocked: blocked}
	return c.script(script, 0, "", "", &stdin)
}

type checker struct {
	blocked map[string]Entry
}

// blockedErr carries a blocking decision up through the walk.
type blockedErr struct{ d Decision }

func (b *blockedErr) Error() string { return b.d.Message() }

func (c *checker) script(src string, depth int, where, pos string, stdin *string) (Decision, error) {
	if depth > MaxDepth {
		return Decision{}, ErrTooDeep
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		return Decision{}, &ParseError{Where: where, Err: err}
	}
	if err := c.file(f, depth, where, pos, stdin); err != nil {
		var b *blockedErr
		if errors.As(err, &b) {
			return b.d, nil
		}
		return Decision{}, err
	}
	return Decision{Allowed: true}, nil
}

func (c *checker) file(f *syntax.File, depth int, where, outerPos string, topStdin *string) error {
	// Text a pipeline's left side produces literally (echo/printf/cat
	// <<heredoc), keyed by the statement it is piped into; the script's own
	// stdin goes to its top-level statements.
	piped := map[*syntax.Stmt]string{}
	if topStdin != nil {
		for _, st := range f.Stmts {
			piped[st] = *topStdin
		}
	}
	var err error
	syntax.Walk(f, func(n syntax.Node) bool {
		if err != nil {
			return false
		}
		switch n := n.(type) {
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				if text, ok := producedText(n.X); ok {
					piped[n.Y] = text
				}
			}
		case *syntax.Stmt:
			call, ok := n.Cmd.(*syntax.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			pos := outerPos
			if pos == "" {
				pos = call.Args[0].Pos().String()
			}
			var stdin *string
			if t, ok := piped[n]; ok {
				stdin = &t
			}
			if t, ok := redirectedText(n.Redirs); ok {
				stdin = &t
			}
			args, ok := c.words(call.Args)
			if !ok {
				err = fmt.Errorf("a command at %s expands to more than %d words; the block list cannot check it", pos, maxBraceWords)
				return false
			}
			err = c.argv(args, stdin, depth, where, pos)
		}
		return err == nil
	})
	return err
}

// arg is one word of a command, as far as it can be known before run time.
type arg struct {
	raw     string // as written
	val     string // its value, when literal
	lit     bool
	pattern string // its value as a glob pattern, when it has unquoted glob characters
}

func (c *checker) words(ws []*syntax.Word) ([]arg, bool) {
	var out []arg
	for _, w := range ws {
		expanded := []*syntax.Word{w}
		if hasBraces(w) {
			cp := &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
			if syntax.SplitBraces(cp) {
				expanded = expand.Braces(cp)
			}
		}
		for _, e := range expanded {
			out = append(out, wordArgs(e)...)
			if len(out) > maxBraceWords {
				return nil, false
			}
		}
	}
	return out, true
}

func hasBraces(w *syntax.Word) bool {
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok && strings.Contains(l.Value, "{") {
			return true
		}
	}
	return false
}

// wordArgs turns one word into its argument(s): more than one only when an
// unquoted $IFS splits it.
func wordArgs(w *syntax.Word) []arg {
	raw := printWord(w)
	split, literal, glob := false, true, false
	var val, pat strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			v := strings.ReplaceAll(p.Value, "\\\n", "")
			pat.WriteString(v)
			if hasGlobMeta(v) {
				glob = true
			}
			val.WriteString(unescape(v))
		case *syntax.SglQuoted, *syntax.DblQuoted:
			if dq, ok := p.(*syntax.DblQuoted); ok {
				for _, q := range dq.Parts {
					if _, ok := q.(*syntax.Lit); !ok {
						literal = false
					}
				}
			}
			if !literal {
				continue
			}
			v, err := expand.Literal(nil, &syntax.Word{Parts: []syntax.WordPart{p}})
			if err != nil {
				literal = false
				continue
			}
			val.WriteString(v)
			pat.WriteString(escapeGlob(v))
		case *syntax.ParamExp:
			if isPlainIFS(p) {
				val.WriteString(" ")
				pat.WriteString(" ")
				split = true
				continue
			}
			literal = false
		default:
			literal = false
		}
	}
	if !literal {
		return []arg{{raw: raw}}
	}
	if !split {
		a := arg{raw: raw, val: val.String(), lit: true}
		if glob {
			a.pattern = pat.String()
		}
		return []arg{a}
	}
	var out []arg
	for _, f := range strings.Fields(val.String()) {
		out = append(out, arg{raw: raw, val: f, lit: true})
	}
	return out
}

// unescape removes the backslashes of an unquoted literal (r\m is rm).
func unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isPlainIFS(p *syntax.ParamExp) bool {
	return p.Param != nil && p.Param.Value == "IFS" && !p.Excl && !p.Length && !p.Width &&
		p.Index == nil && p.Slice == nil && p.Repl == nil && p.Exp == nil
}

func hasGlobMeta(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}

func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func printWord(w *syntax.Word) string {
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, w); err != nil {
		return "?"
	}
	return b.String()
}

// match returns the entry a command word names, if blocked.
func (c *checker) match(a arg) (Entry, bool) {
	if a.pattern != "" {
		base := a.pattern
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		names := make([]string, 0, len(c.blocked))
		for n := range c.blocked {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if ok, err := path.Match(base, n); ok && err == nil {
				return c.blocked[n], true
			}
		}
		return Entry{}, false
	}
	if !a.lit {
		return Entry{}, false
	}
	name := a.val
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	e, ok := c.blocked[name]
	return e, ok
}

// argv checks one command line: its name, then what wrappers, shells and
// eval run.
func (c *checker) argv(args []arg, stdin *string, depth int, where, pos string) error {
	for hops := 0; len(args) > 0 && hops < 32; hops++ {
		name := args[0]
		if e, ok := c.match(name); ok {
			return &blockedErr{Decision{Rule: e, Found: name.raw, Where: where, Pos: pos}}
		}
		if !name.lit {
			return nil // a name only known at run time: see the package comment
		}
		base := name.val
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		rest := args[1:]
		via := func(w string) string {
			if where == "" {
				return "after " + w
			}
			return where + ", after " + w
		}
		switch base {
		case "env":
			next, split := skipEnv(rest)
			if split != nil {
				return c.nested(*split, depth, via("env -S"), pos)
			}
			args, where = next, via("env")
		case "sudo", "doas":
			args, where = skipOpts(rest, "ughpCrtUDRT", nil), via(base)
		case "nohup", "setsid", "builtin", "chronic", "unbuffer", "catchsegv":
			args, where = skipOpts(rest, "", nil), via(base)
		case "nice":
			args, where = skipOpts(rest, "n", []string{"--adjustment"}), via(base)
		case "ionice":
			args, where = skipOpts(rest, "cnp", []string{"--class", "--classdata", "--pid"}), via(base)
		case "stdbuf":
			args, where = skipOpts(rest, "ioe", []string{"--input", "--output", "--error"}), via(base)
		case "time":
			args, where = skipOpts(rest, "fo", []string{"--format", "--output"}), via(base)
		case "timeout":
			r := skipOpts(rest, "sk", []string{"--signal", "--kill-after"})
			if len(r) > 0 {
				r = r[1:] // the duration
			}
			args, where = r, via(base)
		case "command":
			r := rest
			for len(r) > 0 && r[0].lit && strings.HasPrefix(r[0].val, "-") && r[0].val != "-" {
				if r[0].val == "--" {
					r = r[1:]
					break
				}
				if strings.ContainsAny(r[0].val, "vV") {
					return nil // command -v NAME only looks the name up
				}
				r = r[1:]
			}
			args, where = r, via(base)
		case "exec":
			args, where = skipOpts(rest, "a", nil), via(base)
		case "xargs":
			r := skipOpts(rest, "adEeIiLlnPs", []string{"--arg-file", "--delimiter", "--eof", "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"})
			args, stdin, where = r, nil, via(base)
		case "busybox":
			args, where = rest, via(base)
		case "watch":
			r := skipOpts(rest, "nd", []string{"--interval", "--differences"})
			return c.joined(r, depth, via(base), pos)
		case "find":
			return c.find(rest, depth, via(base), pos)
		case "eval":
			return c.joined(rest, depth, via("eval"), pos)
		case "su":
			return c.su(rest, depth, via(base), pos)
		case "alias":
			for _, a := range rest {
				if a.lit {
					if _, v, ok := strings.Cut(a.val, "="); ok {
						if err := c.nested(v, depth, via("alias"), pos); err != nil {
							return err
						}
					}
				}
			}
			return nil
		default:
			if isShell(base) {
				return c.shell(base, rest, stdin, depth, where, pos)
			}
			return nil
		}
	}
	return nil
}

func isShell(name string) bool {
	switch name {
	case "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "posh", "yash", "ksh93", "lksh", "pdksh":
		return true
	}
	return false
}

// skipOpts drops leading options: short options in withArg take the next
// word (or the rest of their cluster), long options in longWithArg take the
// next word unless written --opt=value; "--" ends the options.
func skipOpts(args []arg, withArg string, longWithArg []string) []arg {
	for len(args) > 0 {
		a := args[0]
		if !a.lit || !strings.HasPrefix(a.val, "-") || a.val == "-" {
			return args
		}
		if a.val == "--" {
			return args[1:]
		}
		if strings.HasPrefix(a.val, "--") {
			args = args[1:]
			if !strings.Contains(a.val, "=") {
				for _, l := range longWithArg {
					if a.val == l && len(args) > 0 {
						args = args[1:]
						break
					}
				}
			}
			continue
		}
		args = args[1:]
		cluster := a.val[1:]
		for i := 0; i < len(cluster); i++ {
			if strings.IndexByte(withArg, cluster[i]) >= 0 {
				if i == len(cluster)-1 && len(args) > 0 {
					args = args[1:] // -u root
				}
				break // -uroot: the rest of the cluster is the value
			}
		}
	}
	return args
}

// skipEnv drops env's options and NAME=VALUE assignments; split is the
// string of env -S, which env splits into a command line.
func skipEnv(args []arg) (rest []arg, split *string) {
	for len(args) > 0 {
		a := args[0]
		if !a.lit {
			return args, nil
		}
		switch {
		case a.val == "--":
			args = args[1:]
			continue
		case a.val == "-" || a.val == "-i" || a.val == "--ignore-environment" || a.val == "-0" || a.val == "--null" || a.val == "-v" || a.val == "--debug":
			args = args[1:]
			continue
		case a.val == "-u" || a.val == "--unset" || a.val == "-C" || a.val == "--chdir":
			args = args[1:]
			if len(args) > 0 {
				args = args[1:]
			}
			continue
		case a.val == "-S" || a.val == "--split-string":
			if len(args) > 1 && args[1].lit {
				s := strings.Join(vals(args[1:]), " ")
				return nil, &s
			}
			return nil, nil
		case strings.HasPrefix(a.val, "-S"):
			s := strings.Join(append([]string{a.val[2:]}, vals(args[1:])...), " ")
			return nil, &s
		case strings.HasPrefix(a.val, "--split-string="):
			s := strings.Join(append([]string{strings.TrimPrefix(a.val, "--split-string=")}, vals(args[1:])...), " ")
			return nil, &s
		case strings.HasPrefix(a.val, "--"), strings.HasPrefix(a.val, "-u"), strings.HasPrefix(a.val, "-C"):
			args = args[1:]
			continue
		case strings.HasPrefix(a.val, "-") && len(a.val) > 1:
			args = args[1:]
			continue
		case strings.Contains(a.val, "=") && !strings.HasPrefix(a.val, "="):
			args = args[1:]
			continue
		}
		return args, nil
	}
	return nil, nil
}

func vals(args []arg) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if a.lit {
			out = append(out, a.val)
		} else {
			out = append(out, a.raw)
		}
	}
	return out
}

// nested parses a shell string found inside the script.
func (c *checker) nested(src string, depth int, where, pos string) error {
	d, err := c.script(src, depth+1, where, pos, nil)
	if err != nil {
		return err
	}
	if !d.Allowed {
		return &blockedErr{d}
	}
	return nil
}

// joined checks words that a command joins with spaces and runs as shell
// (eval, watch). Words known only at run time are kept as written.
func (c *checker) joined(args []arg, depth int, where, pos string) error {
	if len(args) == 0 {
		return nil
	}
	return c.nested(strings.Join(vals(args), " "), depth, where, pos)
}

// find runs the command after -exec/-execdir/-ok/-okdir up to ";" or "+".
func (c *checker) find(args []arg, depth int, where, pos string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !a.lit {
			continue
		}
		switch a.val {
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && !(args[j].lit && (args[j].val == ";" || args[j].val == "+")) {
				j++
			}
			if err := c.argv(args[i+1:j], nil, depth, where, pos); err != nil {
				return err
			}
			i = j
		}
	}
	return nil
}

// su -c CMD / --command=CMD runs CMD with a shell.
func (c *checker) su(args []arg, depth int, where, pos string) error {
	for i, a := range args {
		if !a.lit {
			continue
		}
		switch {
		case (a.val == "-c" || a.val == "--command" || a.val == "--session-command") && i+1 < len(args):
			if args[i+1].lit {
				return c.nested(args[i+1].val, depth, where+" -c", pos)
			}
		case strings.HasPrefix(a.val, "--command="):
			return c.nested(strings.TrimPrefix(a.val, "--command="), depth, where+" -c", pos)
		}
	}
	return nil
}

// shell checks what a shell runs: its -c string, or the text it reads on
// stdin (a heredoc, a here-string, literal text piped in).
func (c *checker) shell(name string, args []arg, stdin *string, depth int, where, pos string) error {
	cflag, sflag := false, false
	for len(args) > 0 {
		a := args[0]
		if !a.lit || len(a.val) < 2 || (a.val[0] != '-' && a.val[0] != '+') {
			break
		}
		args = args[1:]
		if a.val == "--" || a.val == "-" {
			break
		}
		if strings.HasPrefix(a.val, "--") {
			switch a.val {
			case "--rcfile", "--init-file":
				if len(args) > 0 {
					args = args[1:]
				}
			}
			continue
		}
		cluster := a.val[1:]
		if a.val[0] == '-' && strings.ContainsRune(cluster, 'c') {
			cflag = true
		}
		if a.val[0] == '-' && strings.ContainsRune(cluster, 's') {
			sflag = true
		}
		if strings.ContainsAny(cluster, "oO") && len(args) > 0 {
			args = args[1:] // -o pipefail, -O extglob
		}
	}
	in := "inside " + name + " -c"
	if where != "" {
		in = where + ", " + in
	}
	if cflag {
		if len(args) == 0 || !args[0].lit {
			return nil // a -c string only known at run time
		}
		return c.nested(args[0].val, depth, in, pos)
	}
	if (sflag || len(args) == 0) && stdin != nil {
		w := "in the text fed to " + name
		if where != "" {
			w = where + ", " + w
		}
		return c.nested(*stdin, depth, w, pos)
	}
	return nil
}

// producedText is the text a statement writes when it is a literal echo,
// printf or cat of a heredoc (what "echo 'rm x' | sh" feeds the shell).
func producedText(s *syntax.Stmt) (string, bool) {
	call, ok := s.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) == 0 {
		return "", false
	}
	var words []string
	for _, w := range call.Args {
		as := wordArgs(w)
		for _, a := range as {
			if !a.lit {
				words = append(words, "__dynamic__")
			} else {
				words = append(words, a.val)
			}
		}
	}
	switch path.Base(words[0]) {
	case "echo":
		rest := words[1:]
		for len(rest) > 0 && (rest[0] == "-e" || rest[0] == "-n" || rest[0] == "-E" || rest[0] == "-ne" || rest[0] == "-en") {
			rest = rest[1:]
		}
		return strings.ReplaceAll(strings.Join(rest, " "), `\n`, "\n"), true
	case "printf":
		if len(words) < 2 {
			return "", false
		}
		return strings.ReplaceAll(strings.Join(words[1:], " "), `\n`, "\n"), true
	case "cat":
		if len(words) == 1 {
			return redirectedText(s.Redirs)
		}
	}
	return "", false
}

// redirectedText is the text of a heredoc or here-string on a statement.
func redirectedText(rs []*syntax.Redirect) (string, bool) {
	for _, r := range rs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			if r.Hdoc != nil {
				return docText(r.Hdoc), true
			}
		case syntax.WordHdoc:
			if r.Word != nil {
				as := wordArgs(r.Word)
				if len(as) == 1 && as[0].lit {
					return as[0].val, true
				}
				return docText(r.Word), true
			}
		}
	}
	return "", false
}

// docText is a heredoc body with what expands at run time replaced by a
// placeholder word (its command substitutions are checked where they stand).
func docText(w *syntax.Word) string {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
		default:
			b.WriteString("__dynamic__")
		}
	}
	return b.String()
}
