package workspace

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/baseline"
	"github.com/sandboxer/sandboxer/internal/hosttree"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// hostileNames are name parts a workspace's agent may choose: each one has
// broken a diff writer somewhere (THREATS 105).
var hostileNames = []string{
	"plain", "with space", "new\nline", "tab\there", `q"uote`, `back\slash`, "..dots", "a..b",
	"-leading-dash", "caf\xc3\xa9", "latin1-\xe9", "bad-\xff\xfe", "bell\x07", "del\x7f", "trailing ",
	"x\n--- /dev/null\n+++ b/PWNED\n@@ -0,0 +1 @@\n+pwned",
}

// TestChangesPatchReproducesTheWorkspace is the property test of
// workspace_changes: 200 random trees with hostile names, each edited at
// random (text edits, additions, deletions, binaries, links, modes); the
// workspace's changes, found as the supervisor finds them and written as the
// server writes them, must pass `git apply --check`, and `git apply` of them
// to the original tree must give exactly the edited tree.
func TestChangesPatchReproducesTheWorkspace(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	rng := rand.New(rand.NewSource(31))
	for round := 0; round < 200; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			orig := randomTree(rng)
			work, apply := t.TempDir(), t.TempDir()
			orig.write(t, work)
			orig.write(t, apply)
			base := buildBaseline(t, work)
			edited := orig.edit(rng)
			syncTree(t, work, orig, edited)

			found, err := hosttree.Changes(work, proto.ChangesRequest{Baseline: base.Entries, MaxFileBytes: changesMaxFile, MaxTotalBytes: changesMaxTotal})
			if err != nil {
				t.Fatal(err)
			}
			blob := func(sum string) ([]byte, error) { return base.store.Blob("w", sum) }
			sums, diff, err := writeChanges(found, base.Entries, blob)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sums {
				if s.NotInDiff {
					t.Fatalf("%q left out of the diff: %s", s.Path, s.Note)
				}
			}
			if n, want := strings.Count(diff, "\ndiff --git ")+boolInt(strings.HasPrefix(diff, "diff --git ")), headerCount(orig, edited); n != want {
				t.Fatalf("%d diff headers for %d changed paths:\n%s", n, want, diff)
			}
			for _, args := range [][]string{{"apply", "--check", "--allow-empty", "-"}, {"apply", "--allow-empty", "-"}} {
				cmd := exec.Command("git", args...)
				cmd.Dir, cmd.Stdin = apply, strings.NewReader(diff)
				cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(apply))
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git %s: %v\n%s\npatch:\n%q", args[0:2], err, out, diff)
				}
			}
			if got, want := readTree(t, apply), readTree(t, work); !equalTrees(got, want) {
				t.Fatalf("after git apply:\n%v\nthe workspace:\n%v\npatch:\n%q", got, want, diff)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// entry is one file or link of a test tree.
type entry struct {
	link    bool
	exec    bool
	content string // a file's bytes, a link's target
}

type tree map[string]entry

func randomName(rng *rand.Rand) string {
	return hostileNames[rng.Intn(len(hostileNames))] + fmt.Sprint(rng.Intn(3))
}

func randomContent(rng *rand.Rand) string {
	if rng.Intn(4) == 0 { // binary
		b := make([]byte, rng.Intn(3000))
		rng.Read(b)
		return "\x00" + string(b)
	}
	var s strings.Builder
	for i := rng.Intn(30); i > 0; i-- {
		fmt.Fprintf(&s, "line %d\n", rng.Intn(6))
	}
	if rng.Intn(4) == 0 {
		s.WriteString("no newline")
	}
	return s.String()
}

func randomTree(rng *rand.Rand) tree {
	t := tree{}
	dirs := []string{"", randomName(rng) + "/", randomName(rng) + "/" + randomName(rng) + "/"}
	for i := 1 + rng.Intn(8); i > 0; i-- {
		p := dirs[rng.Intn(len(dirs))] + randomName(rng)
		if t.conflicts(p) {
			continue
		}
		if rng.Intn(6) == 0 {
			t[p] = entry{link: true, content: "../" + randomName(rng)}
		} else {
			t[p] = entry{content: randomContent(rng), exec: rng.Intn(4) == 0}
		}
	}
	return t
}

// conflicts: p would be a file where a directory is, or below a file.
func (t tree) conflicts(p string) bool {
	for q := range t {
		if q == p || strings.HasPrefix(q, p+"/") || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

func (t tree) paths() []string {
	var ps []string
	for p := range t {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// edit returns a copy of t with random changes.
func (t tree) edit(rng *rand.Rand) tree {
	out := tree{}
	for p, e := range t {
		out[p] = e
	}
	for _, p := range t.paths() {
		e := out[p]
		switch rng.Intn(8) {
		case 0:
			delete(out, p)
		case 1:
			if !e.link {
				e.content = randomContent(rng)
			} else {
				e.content = "elsewhere/" + randomName(rng)
			}
			out[p] = e
		case 2:
			if !e.link {
				e.exec = !e.exec
				out[p] = e
			}
		case 3:
			out[p] = entry{link: !e.link, content: randomContent(rng)}
			if !e.link {
				out[p] = entry{link: true, content: randomName(rng)}
			}
		case 4:
			if !e.link && !strings.HasPrefix(e.content, "\x00") {
				e.content += "appended\n"
				out[p] = e
			}
		}
	}
	for i := rng.Intn(4); i > 0; i-- {
		p := randomName(rng) + "/" + randomName(rng)
		if rng.Intn(2) == 0 {
			p = randomName(rng)
		}
		if !out.conflicts(p) {
			out[p] = entry{content: randomContent(rng), exec: rng.Intn(3) == 0}
		}
	}
	return out
}

func (t tree) write(tb testing.TB, dir string) {
	for _, p := range t.paths() {
		writeEntry(tb, dir, p, t[p])
	}
}

func writeEntry(tb testing.TB, dir, p string, e entry) {
	full := filepath.Join(dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		tb.Fatal(err)
	}
	if e.link {
		if err := os.Symlink(e.content, full); err != nil {
			tb.Fatal(err)
		}
		return
	}
	mode := os.FileMode(0o644)
	if e.exec {
		mode = 0o755
	}
	if err := os.WriteFile(full, []byte(e.content), mode); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(full, mode); err != nil {
		tb.Fatal(err)
	}
}

// syncTree turns dir, which holds from, into to, as an agent's edits would.
func syncTree(tb testing.TB, dir string, from, to tree) {
	for _, p := range from.paths() {
		if e, ok := to[p]; !ok || e != from[p] {
			if err := os.Remove(filepath.Join(dir, p)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	// Directories that are now empty go, as they would from git's view.
	for _, p := range from.paths() {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			os.Remove(filepath.Join(dir, d)) // fails while not empty
		}
	}
	for _, p := range to.paths() {
		if e, ok := from[p]; !ok || e != to[p] {
			writeEntry(tb, dir, p, to[p])
		}
	}
}

// headerCount is how many "diff --git" headers the change from a to b
// takes: one per changed path, two where a file became a link or back.
func headerCount(a, b tree) int {
	n := 0
	for p, e := range a {
		f, ok := b[p]
		switch {
		case !ok:
			n++
		case f == e:
		case f.link != e.link:
			n += 2
		case !e.link && e.content == f.content && e.exec == f.exec:
		default:
			n++
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			n++
		}
	}
	return n
}

type testBaseline struct {
	*baseline.Manifest
	store *baseline.Store
}

// buildBaseline keeps dir's tree as workspace "w"'s baseline, read from a
// tar stream as an import reads it.
func buildBaseline(tb testing.TB, dir string) testBaseline {
	root, err := os.OpenRoot(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer root.Close()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := hosttree.WriteTar(tw, root, ".", 1000, 1000, 0, nil, nil); err != nil {
		tb.Fatal(err)
	}
	tw.Close()
	st := baseline.New(tb.TempDir())
	p, err := st.Build(&buf, "test", 1<<30, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Commit("w"); err != nil {
		tb.Fatal(err)
	}
	m, err := st.Load("w")
	if err != nil {
		tb.Fatal(err)
	}
	return testBaseline{m, st}
}

// readTree reads dir's files and links (directories are not git's).
func readTree(tb testing.TB, dir string) tree {
	t := tree{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			t[r] = entry{link: true, content: target}
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		t[r] = entry{content: string(b), exec: info.Mode()&0o100 != 0}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func equalTrees(a, b tree) bool {
	if len(a) != len(b) {
		return false
	}
	for p, e := range a {
		if b[p] != e {
			return false
		}
	}
	return true
}
