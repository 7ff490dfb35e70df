package program

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestGoCacheProg drives the real go command with the supervisor as its
// GOCACHEPROG: a build whose standard packages are in a read-only seed
// compiles only the program itself, writes only to its own GOCACHE, and a
// second build is served entirely from the caches.
func TestGoCacheProg(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go code")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	mod := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/hello\n\ngo 1.22\n")
	write("main.go", "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() { fmt.Println(strings.ToUpper(\"hi\")) }\n")
	goCmd := func(env []string, args ...string) string {
		t.Helper()
		return goIn(t, goBin, mod, env, args...)
	}
	// The seed, in the go command's own layout, built from another program
	// with the same imports, then made read-only.
	seedMod := t.TempDir()
	writeTree(t, seedMod, map[string]string{"go.mod": "module example.com/seed\n\ngo 1.22\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() { fmt.Println(strings.ToLower(\"SEED\")) }\n"})
	seed := t.TempDir()
	goIn(t, goBin, seedMod, []string{"GOCACHE=" + seed}, "build", "-o", os.DevNull, ".")

	if err := exec.Command("chmod", "-R", "a-w", seed).Run(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("chmod", "-R", "u+w", seed).Run() })

	own := t.TempDir()
	env := []string{"GOCACHE=" + own, "GOCACHEPROG=" + supBin + " " + goCacheProgCommand, goCacheSeedsEnv + "=" + seed}
	first := goCmd(env, "build", "-x", "-o", filepath.Join(own, "hello"), ".")
	if strings.Contains(first, "-p fmt ") || strings.Contains(first, "-p runtime ") {
		t.Errorf("the standard packages were compiled again despite the seed:\n%s", first)
	}
	if !strings.Contains(first, "-p main ") {
		t.Errorf("the program itself was not compiled (is the cache answering for it?):\n%s", first)
	}
	if out, err := exec.Command(filepath.Join(own, "hello")).Output(); err != nil || string(out) != "HI\n" {
		t.Fatalf("hello: %q %v", out, err)
	}
	// Its own entries are in its own GOCACHE, none in the seed.
	entries, _ := filepath.Glob(filepath.Join(own, "*", "*-a"))
	if len(entries) == 0 {
		t.Errorf("no entry written to the job's own GOCACHE")
	}
	second := goCmd(env, "build", "-x", "-o", filepath.Join(own, "hello2"), ".")
	if strings.Contains(second, "-p main ") {
		t.Errorf("the second build compiled again:\n%s", second)
	}
	// A fresh job (another GOCACHE) sees the seed, never the first job's entries.
	other := t.TempDir()
	env2 := []string{"GOCACHE=" + other, "GOCACHEPROG=" + supBin + " " + goCacheProgCommand, goCacheSeedsEnv + "=" + seed}
	if third := goCmd(env2, "build", "-x", "-o", filepath.Join(other, "hello"), "."); !strings.Contains(third, "-p main ") {
		t.Errorf("a build with another GOCACHE was served the first job's entries:\n%s", third)
	}
}

func goIn(t *testing.T, goBin, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// writeTree writes files (slash-separated names under dir), making their directories.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLinkGoCacheSeeds: a workspace's plain GOCACHE with the seed linked in
// gives the real go command the standard library warm, with no GOCACHEPROG;
// entries the workspace built stay; a link the go command trimmed comes back.
func TestLinkGoCacheSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go code")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	mod := t.TempDir()
	writeTree(t, mod, map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() { fmt.Println(strings.ToUpper(\"hi\")) }\n"})
	seed := t.TempDir()
	goIn(t, goBin, mod, []string{"GOCACHE=" + seed}, "build", "-o", os.DevNull, "fmt", "strings")
	own := t.TempDir()
	mine := filepath.Join(own, "ab", "mine-d")
	if err := os.MkdirAll(filepath.Dir(mine), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mine, []byte("built here"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOCACHE", own)
	// An image with no seed (python's): nothing written to its volume.
	t.Setenv(goCacheLinkEnv, "1")
	t.Setenv(goCacheSeedsEnv, "")
	if n, err := linkGoCacheSeeds(); err != nil || n != 0 {
		t.Fatalf("with no seed: %d linked, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(own, seedMarker)); err == nil {
		t.Fatal("a marker was written with no seed")
	}
	t.Setenv(goCacheLinkEnv, "")
	t.Setenv(goCacheSeedsEnv, seed)
	if n, err := linkGoCacheSeeds(); err != nil || n != 0 {
		t.Fatalf("without %s: %d linked, %v", goCacheLinkEnv, n, err)
	}
	t.Setenv(goCacheLinkEnv, "1")
	n, err := linkGoCacheSeeds()
	if err != nil || n == 0 {
		t.Fatalf("linked %d: %v", n, err)
	}
	env := []string{"GOCACHE=" + own, "GOCACHEPROG="}
	out := goIn(t, goBin, mod, env, "build", "-x", "-o", filepath.Join(own, "hello"), ".")
	if strings.Contains(out, "-p fmt ") || !strings.Contains(out, "-p main ") {
		t.Errorf("the build through the linked seed compiled:\n%s", out)
	}
	if b, _ := os.ReadFile(mine); string(b) != "built here" {
		t.Errorf("the workspace's own entry was replaced: %q", b)
	}
	// Action entries are copies the go command may rewrite, not links.
	entries, _ := filepath.Glob(filepath.Join(own, "*", "*-a"))
	for _, e := range entries {
		if fi, err := os.Lstat(e); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("action entry %s is not a file of the workspace's own: %v %v", e, fi.Mode(), err)
		}
	}
	// Another start links nothing: the marker says it was done.
	links, _ := filepath.Glob(filepath.Join(own, "*", "*-d"))
	var gone string
	for _, l := range links {
		if fi, err := os.Lstat(l); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			gone = l
			break
		}
	}
	if gone == "" {
		t.Fatal("no link to the seed in the workspace's cache")
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if n, err := linkGoCacheSeeds(); err != nil || n != 0 {
		t.Fatalf("linked %d again with the marker in place: %v", n, err)
	}
	// Another seed (a new image): what is missing is linked again.
	if err := os.Remove(filepath.Join(own, seedMarker)); err != nil {
		t.Fatal(err)
	}
	if n, err := linkGoCacheSeeds(); err != nil || n != 1 {
		t.Fatalf("relinked %d, want the 1 removed: %v", n, err)
	}
}

// TestGoCacheSeedIndex: a seed with an index is answered from it: an entry
// it lists is found with no action file on disk, one it does not list is
// not, and the real go command builds from an indexed seed as from files.
func TestGoCacheSeedIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go code")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	mod := t.TempDir()
	writeTree(t, mod, map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"})
	seedDir := t.TempDir()
	goIn(t, goBin, mod, []string{"GOCACHE=" + seedDir}, "build", "-o", os.DevNull, ".")
	// The index as the go image's Dockerfile writes it.
	script := `cd "$1" && find . -name '*-d' -printf '%f %s\n' | sed 's/-d / /' > outputs && find . -name '*-a' -exec cat {} + > actions && ` +
		`awk 'NR == FNR { size[$1] = $2; next } ($3 in size) && size[$3] == $4 { print $1, $2, $3, $4, $5 }' outputs actions > index && rm outputs actions`
	if out, err := exec.Command("sh", "-c", script, "sh", seedDir).CombinedOutput(); err != nil {
		t.Fatalf("index: %v: %s", err, out)
	}
	idx := readGoCacheIndex(seedDir)
	actions, _ := filepath.Glob(filepath.Join(seedDir, "*", "*-a"))
	if len(idx) == 0 || len(idx) != len(actions) {
		t.Fatalf("index of %d entries for %d action files", len(idx), len(actions))
	}
	indexed := seed{dir: goCache(seedDir), index: idx}
	listed := actions[0]
	id, _ := hex.DecodeString(strings.TrimSuffix(filepath.Base(listed), "-a"))
	want, _, _, disk, ok := goCache(seedDir).get(id)
	if !ok {
		t.Fatal("a listed entry is not in the seed")
	}
	if err := os.Remove(listed); err != nil {
		t.Fatal(err)
	}
	if out, _, _, d, ok := indexed.get(id); !ok || !bytes.Equal(out, want) || d != disk {
		t.Errorf("a listed entry without its action file: %x %q %v, want %x %q", out, d, ok, want, disk)
	}
	delete(idx, hex.EncodeToString(id))
	if err := os.WriteFile(listed, []byte(fmt.Sprintf("v1 %x %x %20d %20d\n", id, want, 1, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, ok := indexed.get(id); ok {
		t.Error("an entry the index does not list was found")
	}
	// The go command, with the indexed seed (the removed entry rebuilt).
	own := t.TempDir()
	env := []string{"GOCACHE=" + own, "GOCACHEPROG=" + supBin + " " + goCacheProgCommand, goCacheSeedsEnv + "=" + seedDir}
	if out := goIn(t, goBin, mod, env, "build", "-x", "-o", filepath.Join(own, "hello"), "."); strings.Contains(out, "-p runtime ") {
		t.Errorf("the indexed seed was not used:\n%s", out)
	}
	if out, err := exec.Command(filepath.Join(own, "hello")).Output(); err != nil || string(out) != "hi\n" {
		t.Fatalf("hello: %q %v", out, err)
	}
}

// TestLinkGoCacheSeedsTwiceAtOnce: an install's linking
// (proto.LinkGoCacheSeedsCommand) beside the daemon's leaves every seed file
// in the cache once, whole, whichever made it: when either returns, a go
// command finds every output of the seed and never writes one itself.
func TestLinkGoCacheSeedsTwiceAtOnce(t *testing.T) {
	seed, own := t.TempDir(), t.TempDir()
	want := map[string]string{}
	for i := range 2000 {
		dir := fmt.Sprintf("%02x", i%256)
		name := fmt.Sprintf("%s%062x", dir, i)
		want[filepath.Join(dir, name+"-a")] = fmt.Sprintf("v1 %s entry %d\n", name, i)
		want[filepath.Join(dir, name+"-d")] = strings.Repeat("o", i)
	}
	for rel, content := range want {
		if err := os.MkdirAll(filepath.Join(seed, filepath.Dir(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(seed, rel), []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOCACHE", own)
	t.Setenv(goCacheLinkEnv, "1")
	t.Setenv(goCacheSeedsEnv, seed)
	var wg sync.WaitGroup
	linked := make([]int, 2)
	for i := range linked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := linkGoCacheSeeds()
			if err != nil {
				t.Errorf("linker %d: %v", i, err)
			}
			linked[i] = n
		}()
	}
	wg.Wait()
	if linked[0]+linked[1] != len(want) {
		t.Errorf("the two linkers made %d and %d names, want %d in all", linked[0], linked[1], len(want))
	}
	for rel, content := range want {
		p := filepath.Join(own, rel)
		if b, err := os.ReadFile(p); err != nil || string(b) != content {
			t.Fatalf("%s: %q, %v; want the seed's %q", rel, b, err, content)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if isLink := fi.Mode()&os.ModeSymlink != 0; isLink != strings.HasSuffix(rel, "-d") {
			t.Fatalf("%s: mode %v: want outputs linked, entries copied", rel, fi.Mode())
		}
	}
}
