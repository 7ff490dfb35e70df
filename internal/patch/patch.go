// Package patch writes changes as a unified diff in git's format, which
// `git apply` (and `patch -p1`) applies: "a/" and "b/" prefixes, /dev/null
// for added and deleted files, git's file modes, "\ No newline at end of
// file" where a file ends without one. Binary files are named, never inlined.
package patch

import (
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

// File is one path's change.
type File struct {
	Path     string
	Old, New Side
	// Binary: the content is not text (or was not available); the diff
	// names the file and says so.
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
	a, b := "a/"+quote(f.Path), "b/"+quote(f.Path)
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "diff --git %s %s\n", a, b)
	switch {
	case !old.Exists:
		fmt.Fprintf(&hdr, "new file mode %s\n", nw.mode())
		a = "/dev/null"
	case !nw.Exists:
		fmt.Fprintf(&hdr, "deleted file mode %s\n", old.mode())
		b = "/dev/null"
	case old.mode() != nw.mode():
		fmt.Fprintf(&hdr, "old mode %s\nnew mode %s\n", old.mode(), nw.mode())
	}
	if f.Binary {
		fmt.Fprintf(&hdr, "Binary files %s and %s differ\n", a, b)
		_, err := io.WriteString(w, hdr.String())
		return err
	}
	hunks := Hunks(lines(old.Content), lines(nw.Content))
	if len(hunks) == 0 && old.Exists && nw.Exists && old.mode() == nw.mode() {
		return nil // nothing git would show
	}
	if len(hunks) > 0 {
		fmt.Fprintf(&hdr, "--- %s\n+++ %s\n", a, b)
	}
	if _, err := io.WriteString(w, hdr.String()); err != nil {
		return err
	}
	for _, h := range hunks {
		if _, err := io.WriteString(w, h); err != nil {
			return err
		}
	}
	return nil
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

// quote leaves ordinary paths alone; git C-quotes the others, which this
// writer does not do, so such names are written as they are.
func quote(p string) string { return p }
