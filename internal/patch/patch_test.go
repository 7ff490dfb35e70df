package patch

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitApplies writes random edits of random files as one patch and
// checks that `git apply` turns the old tree into the new one exactly.
func TestGitApplies(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	rng := rand.New(rand.NewSource(1))
	randLines := func(n int) []byte {
		var b bytes.Buffer
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "line %d\n", rng.Intn(8))
		}
		return b.Bytes()
	}
	edit := func(c []byte) []byte {
		ls := lines(c)
		for i := rng.Intn(6); i >= 0; i-- {
			p := rng.Intn(len(ls) + 1)
			switch rng.Intn(3) {
			case 0:
				ls = append(ls[:p], append([]string{fmt.Sprintf("new %d\n", rng.Intn(100))}, ls[p:]...)...)
			case 1:
				if p < len(ls) {
					ls = append(ls[:p], ls[p+1:]...)
				}
			case 2:
				if p < len(ls) {
					ls[p] = "changed\n"
				}
			}
		}
		out := strings.Join(ls, "")
		if rng.Intn(4) == 0 {
			out = strings.TrimSuffix(out, "\n")
		}
		return []byte(out)
	}
	for round := 0; round < 20; round++ {
		dir := t.TempDir()
		var diff bytes.Buffer
		want := map[string][]byte{}
		for i := 0; i < 6; i++ {
			name := fmt.Sprintf("d%d/f%d.txt", i%2, i)
			old := randLines(rng.Intn(40))
			if rng.Intn(5) == 0 {
				old = bytes.TrimSuffix(old, []byte("\n"))
			}
			f := File{Path: name, Old: Side{Exists: true, Content: old}, New: Side{Exists: true, Content: edit(old)}}
			switch rng.Intn(6) {
			case 0:
				f.Old = Side{}
			case 1:
				f.New = Side{}
			case 2:
				f.New.Executable = true
			}
			if f.Old.Exists {
				os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
				os.WriteFile(filepath.Join(dir, name), f.Old.Content, 0o644)
			}
			if f.New.Exists {
				want[name] = f.New.Content
			}
			if err := Write(&diff, f); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(t.TempDir(), "p"), diff.Bytes(), 0o644)
		cmd := exec.Command("git", "apply", "--unsafe-paths", "-")
		cmd.Dir, cmd.Stdin = dir, bytes.NewReader(diff.Bytes())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("round %d: git apply: %v\n%s\npatch:\n%s", round, err, out, diff.String())
		}
		for name, content := range want {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(got, content) {
				t.Fatalf("round %d: %s after git apply = %q (%v), want %q\npatch:\n%s", round, name, got, err, content, diff.String())
			}
		}
	}
}

func TestQuoteTwoAsGit(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"plain/name.txt", "a/plain/name.txt"},
		{"with space", "a/with space"},
		{"new\nline", `"a/new\nline"`},
		{"tab\there", `"a/tab\there"`},
		{`q"uote`, `"a/q\"uote"`},
		{`back\slash`, `"a/back\\slash"`},
		{"caf\xc3\xa9", `"a/caf\303\251"`},
		{"bell\x07\x7f\x01", `"a/bell\a\177\001"`},
	} {
		if got := QuoteTwo("a/", c.name); got != c.want {
			t.Errorf("QuoteTwo(%q) = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestLongFilesFallBackToReplacement(t *testing.T) {
	var a, c []string
	for i := 0; i < 3*maxEdits; i++ {
		a = append(a, fmt.Sprintf("a%d\n", i))
		c = append(c, fmt.Sprintf("c%d\n", i))
	}
	if h := Hunks(a, c); len(h) != 1 || !strings.HasPrefix(h[0], fmt.Sprintf("@@ -1,%d +1,%d @@", len(a), len(c))) {
		t.Fatalf("hunks: %d, first %q", len(h), h[0][:40])
	}
}
