// Package patch writes changes as a diff in git's format, which `git apply`
// applies: "a/" and "b/" prefixes, /dev/null for added and deleted files,
// git's file modes (120000 for links), full "index" lines, "\ No newline at
// end of file" where a file ends without one, paths C-quoted exactly as git
// quotes them (so no name can write a header of its own), and binary files
// as git's "GIT binary patch" literals (zlib, base85), forward and reverse.
package patch

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// Side is one side of a file's change: absent, a file, or a symbolic link.
type Side struct {
	Exists     bool
	Symlink    bool
	Executable bool
	// Content is a file's bytes or a link's target.
	Content []byte
}

func (s Side) mode() string {
	switch {
	case s.Symlink:
		return "120000"
	case s.Executable:
		return "100755"
	}
	return "100644"
}

// blobID is git's object name of the side's content ("blob <size>\0" and
// the bytes, SHA-1), or forty zeros for an absent side.
func (s Side) blobID() string {
	if !s.Exists {
		return strings.Repeat("0", 40)
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(s.Content))
	h.Write(s.Content)
	return hex.EncodeToString(h.Sum(nil))
}

// File is one path's change.
type File struct {
	Path     string
	Old, New Side
	// Binary: the content is not text; it is written as a binary literal.
	Binary bool
}

// Context is the number of unchanged lines around each hunk.
const Context = 3

// Write writes f's diff to w.
func Write(w io.Writer, f File) error {
	old, nw := f.Old, f.New
	// A file that became a link (or the reverse) is a deletion and an
	// addition, as git writes it.
	if old.Exists && nw.Exists && old.Symlink != nw.Symlink {
		if err := Write(w, File{Path: f.Path, Old: old, Binary: f.Binary && !old.Symlink}); err != nil {
			return err
		}
		return Write(w, File{Path: f.Path, New: nw, Binary: f.Binary && !nw.Symlink})
	}
	if old.Exists && nw.Exists && old.mode() == nw.mode() && bytes.Equal(old.Content, nw.Content) {
		return nil // nothing git would show
	}
	a, b := QuoteTwo("a/", f.Path), QuoteTwo("b/", f.Path)
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "diff --git %s %s\n", a, b)
	index := fmt.Sprintf("index %s..%s", old.blobID(), nw.blobID())
	switch {
	case !old.Exists:
		fmt.Fprintf(&hdr, "new file mode %s\n%s\n", nw.mode(), index)
		a = "/dev/null"
	case !nw.Exists:
		fmt.Fprintf(&hdr, "deleted file mode %s\n%s\n", old.mode(), index)
		b = "/dev/null"
	case old.mode() != nw.mode():
		fmt.Fprintf(&hdr, "old mode %s\nnew mode %s\n%s\n", old.mode(), nw.mode(), index)
	default:
		fmt.Fprintf(&hdr, "%s %s\n", index, old.mode())
	}
	if bytes.Equal(old.Content, nw.Content) {
		_, err := io.WriteString(w, hdr.String()) // a mode change, or an empty file added or deleted
		return err
	}
	// git ends a name holding a space with a tab on these lines, so that
	// the name's end is clear.
	tab := ""
	if strings.ContainsRune(f.Path, ' ') {
		tab = "\t"
	}
	if f.Binary {
		hdr.WriteString("GIT binary patch\n")
		writeLiteral(&hdr, nw.Content)
		writeLiteral(&hdr, old.Content)
		_, err := io.WriteString(w, hdr.String())
		return err
	}
	fmt.Fprintf(&hdr, "--- %s%s\n+++ %s%s\n", a, tab, b, tab)
	if _, err := io.WriteString(w, hdr.String()); err != nil {
		return err
	}
	for _, h := range Hunks(lines(old.Content), lines(nw.Content)) {
		if _, err := io.WriteString(w, h); err != nil {
			return err
		}
	}
	return nil
}

// writeLiteral writes one hunk of a git binary patch: "literal SIZE", the
// zlib-compressed content in base85 lines of up to 52 bytes each (a length
// letter first), and an empty line.
func writeLiteral(w *strings.Builder, content []byte) {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zw.Write(content)
	zw.Close()
	fmt.Fprintf(w, "literal %d\n", len(content))
	data := z.Bytes()
	for len(data) > 0 {
		n := min(len(data), 52)
		if n <= 26 {
			w.WriteByte(byte('A' + n - 1))
		} else {
			w.WriteByte(byte('a' + n - 27))
		}
		w.WriteString(base85(data[:n]))
		w.WriteByte('\n')
		data = data[n:]
	}
	w.WriteByte('\n')
}

// base85Alphabet is git's (base85.c), not Ascii85's.
const base85Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// base85 encodes b in groups of four bytes (the last one padded with
// zeros), five characters each, most significant first.
func base85(b []byte) string {
	var out []byte
	for len(b) > 0 {
		var acc uint32
		for i := 0; i < 4; i++ {
			acc <<= 8
			if i < len(b) {
				acc |= uint32(b[i])
			}
		}
		var group [5]byte
		for i := 4; i >= 0; i-- {
			group[i] = base85Alphabet[acc%85]
			acc /= 85
		}
		out = append(out, group[:]...)
		b = b[min(4, len(b)):]
	}
	return string(out)
}

// QuoteTwo is prefix+name as git writes it in a diff (quote.c's
// quote_two): as it is when no byte needs quoting, else in double quotes
// with C escapes.
func QuoteTwo(prefix, name string) string {
	if !needsQuote(prefix) && !needsQuote(name) {
		return prefix + name
	}
	return `"` + cEscape(prefix) + cEscape(name) + `"`
}

// needsQuote: git (core.quotePath, its default) quotes a name holding a
// control character, a double quote, a backslash or a byte above 0x7e.
func needsQuote(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return true
		}
	}
	return false
}

// cEscape escapes as git's quote_c_style: \a \b \t \n \v \f \r \" \\ by
// name, every other byte that needs quoting as three octal digits.
func cEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 7 && c <= 13:
			b.WriteByte('\\')
			b.WriteByte("abtnvfr"[c-7])
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// lines splits content into lines that keep their "\n"; the last one lacks
// it when the content does not end with one.
func lines(b []byte) []string {
	var out []string
	s := string(b)
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

type op struct {
	kind byte // ' ', '-', '+'
	line string
}

// Hunks returns the unified hunks turning a into b.
func Hunks(a, b []string) []string {
	ops := diff(a, b)
	var out []string
	// Walk the edit script, cutting it into hunks of changes with up to
	// Context lines around them (joining hunks whose contexts touch).
	i := 0
	aLine, bLine := 1, 1
	lineAt := make([][2]int, len(ops)+1) // 1-based a and b line numbers before ops[k]
	for k, o := range ops {
		lineAt[k] = [2]int{aLine, bLine}
		if o.kind != '+' {
			aLine++
		}
		if o.kind != '-' {
			bLine++
		}
	}
	lineAt[len(ops)] = [2]int{aLine, bLine}
	for i < len(ops) {
		for i < len(ops) && ops[i].kind == ' ' {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(i-Context, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*Context {
				end = min(end+Context, run)
				break
			}
			end = run
		}
		out = append(out, hunk(ops[start:end], lineAt[start]))
		i = end
	}
	return out
}

func hunk(ops []op, at [2]int) string {
	var na, nb int
	for _, o := range ops {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "@@ -%s +%s @@\n", rng(at[0], na), rng(at[1], nb))
	for _, o := range ops {
		s.WriteByte(o.kind)
		s.WriteString(o.line)
		if !strings.HasSuffix(o.line, "\n") {
			s.WriteString("\n\\ No newline at end of file\n")
		}
	}
	return s.String()
}

// rng is a hunk's range as unified diffs write it: an empty range names
// the line before it.
func rng(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// diff is Myers' O(ND) shortest edit script from a to b.
func diff(a, b []string) []op {
	// Common prefix and suffix cost nothing; they are most of a file.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []op
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	ops = append(ops, myers(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}
	return ops
}

// maxEdits bounds the search (its memory grows with the square of the
// edits): past it, the whole middle is written as replaced.
const maxEdits = 4000

func myers(a, b []string) []op {
	n, m := len(a), len(b)
	if n == 0 && m == 0 {
		return nil
	}
	maxD := n + m
	off := maxD
	v := make([]int, 2*maxD+2)
	var trace [][]int // trace[d][k+d] is v[off+k] before step d
	for d := 0; d <= maxD; d++ {
		if d > maxEdits {
			return replaced(a, b)
		}
		trace = append(trace, append([]int(nil), v[off-d:off+d+1]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, a, b, off, d, k)
			}
		}
	}
	return nil
}

func replaced(a, b []string) []op {
	var ops []op
	for _, l := range a {
		ops = append(ops, op{'-', l})
	}
	for _, l := range b {
		ops = append(ops, op{'+', l})
	}
	return ops
}

// backtrack walks the saved frontiers back from (n, m) to (0, 0).
func backtrack(trace [][]int, a, b []string, off, d, k int) []op {
	x, y := len(a), len(b)
	var rev []op
	for ; d > 0; d-- {
		v := func(k int) int { return trace[d][k+d] }
		var pk int
		if k == -d || k != d && v(k-1) < v(k+1) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := v(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, op{' ', a[x]})
		}
		if x == px {
			y--
			rev = append(rev, op{'+', b[y]})
		} else {
			x--
			rev = append(rev, op{'-', a[x]})
		}
		k = pk
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, op{' ', a[x]})
	}
	out := make([]op, len(rev))
	for i, o := range rev {
		out[len(rev)-1-i] = o
	}
	return out
}
