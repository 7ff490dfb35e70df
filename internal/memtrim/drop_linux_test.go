package memtrim

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestReadOnlyMappingOf(t *testing.T) {
	const exe = "/usr/bin/sandboxer"
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"00400000-01f7d000 r-xp 00000000 fd:01 123 /usr/bin/sandboxer", true},
		{"01f7d000-040af000 r--p 01b7d000 fd:01 123 /usr/bin/sandboxer", true},
		{"040af000-041a4000 rw-p 03caf000 fd:01 123 /usr/bin/sandboxer", false}, // data: written
		{"7f00-7f10 r--s 0 fd:01 9 /usr/bin/sandboxer", false},                  // shared
		{"7f00-7f10 r--p 0 fd:01 9 /usr/lib/libc.so.6", false},                  // another file
		{"7f00-7f10 rw-p 0 00:00 0", false},                                     // anonymous
		{"zz-7f10 r--p 0 fd:01 9 /usr/bin/sandboxer", false},
	} {
		s, e, ok := readOnlyMappingOf(c.line, exe)
		if ok != c.ok || ok && e <= s {
			t.Errorf("%q: ok %v (%x-%x), want %v", c.line, ok, s, e, c.ok)
		}
	}
}

// TestDropBinaryPagesShrinksRSS drops this test binary's own read-only pages
// and reads the kernel's count of resident file pages before and after.
func TestDropBinaryPagesShrinksRSS(t *testing.T) {
	before := rssFileKB(t)
	dropBinaryPages()
	after := rssFileKB(t)
	t.Logf("RssFile %d kB -> %d kB", before, after)
	if after >= before {
		t.Fatalf("RssFile did not shrink: %d kB -> %d kB", before, after)
	}
	Trim() // and the process goes on running its code
}

func rssFileKB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
