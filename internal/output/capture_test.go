package output

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

func openT(t *testing.T, dir string, maxBytes int64, ringBytes int) *Capture {
	t.Helper()
	c, err := Open(dir, maxBytes, ringBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readAll(t *testing.T, c *Capture, sel Selector) []byte {
	t.Helper()
	var all []byte
	for cur := int64(0); ; {
		data, next, err := c.Read(sel, cur, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 {
			return all
		}
		all = append(all, data...)
		cur = next
	}
}

func TestReadRingAndDiskAgree(t *testing.T) {
	const ringBytes = 100
	c := openT(t, t.TempDir(), 1<<20, ringBytes)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	for range 200 {
		p := make([]byte, rng.IntN(2*ringBytes))
		for i := range p {
			p[i] = byte(rng.IntN(256))
		}
		c.Write(sandbox.Stream(1+rng.IntN(2)), p)
		want = append(want, p...)
	}
	if got := c.Size(Both); got != int64(len(want)) {
		t.Fatalf("size %d, want %d", got, len(want))
	}
	fromRing := 0
	for _, n := range []int{1, 10, 99, 100, 101, 1000} {
		for cur := int64(len(want)) - 3*ringBytes; cur <= int64(len(want)); cur++ {
			data, next, err := c.Read(Both, cur, n)
			if err != nil {
				t.Fatal(err)
			}
			end := min(cur+int64(n), int64(len(want)))
			if !bytes.Equal(data, want[cur:end]) || next != end {
				t.Fatalf("Read(%d,%d): got %d bytes next %d, want %d bytes next %d", cur, n, len(data), next, end-cur, end)
			}
			// The same range straight from disk must match too.
			disk := make([]byte, end-cur)
			f, _ := os.Open(filepath.Join(c.Dir(), "combined.log"))
			f.ReadAt(disk, cur)
			f.Close()
			if !bytes.Equal(disk, data) {
				t.Fatalf("disk and Read differ at %d", cur)
			}
			buf := make([]byte, end-cur)
			if c.ring.readAt(buf, cur) {
				fromRing++
				if !bytes.Equal(buf, disk) {
					t.Fatalf("ring and disk differ at %d", cur)
				}
			}
		}
	}
	if fromRing == 0 {
		t.Fatal("no read was served by the ring")
	}
}

func TestResume(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, 1<<20, 8)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(sandbox.Stdout, []byte("out1\n"))
	c.Write(sandbox.Stderr, []byte("err1\n"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	// Reads still work after Close.
	if got := readAll(t, c, Both); string(got) != "out1\nerr1\n" {
		t.Fatalf("after close: %q", got)
	}

	c2 := openT(t, dir, 1<<20, 8)
	if s := c2.Sizes(); s.Stdout != 5 || s.Stderr != 5 || s.Combined != 10 {
		t.Fatalf("resumed sizes %+v", s)
	}
	// The ring was refilled from the end of combined.log.
	buf := make([]byte, 8)
	if !c2.ring.readAt(buf, 2) || string(buf) != "t1\nerr1\n" {
		t.Fatalf("ring after resume: %q (start %d n %d)", buf, c2.ring.start, c2.ring.n)
	}
	c2.Write(sandbox.Stdout, []byte("out2\n"))
	for _, tc := range []struct {
		sel  Selector
		want string
	}{
		{Both, "out1\nerr1\nout2\n"},
		{StdoutOnly, "out1\nout2\n"},
		{StderrOnly, "err1\n"},
	} {
		if got := readAll(t, c2, tc.sel); string(got) != tc.want {
			t.Errorf("%v: got %q, want %q", tc.sel, got, tc.want)
		}
	}
	// ... and keeps following new writes.
	if !c2.ring.readAt(buf, 7) || string(buf) != "r1\nout2\n" {
		t.Fatalf("ring after resume: %q (start %d n %d)", buf, c2.ring.start, c2.ring.n)
	}
}

func TestCapDropsAndCounts(t *testing.T) {
	c := openT(t, t.TempDir(), 10, 4)
	c.Write(sandbox.Stdout, []byte("12345678"))
	c.Write(sandbox.Stderr, []byte("abcdef"))
	c.Write(sandbox.Stdout, []byte("XYZ"))
	want := Sizes{
		Stdout: 10, Stderr: 6, Combined: 10,
		DroppedStdout: 1, DroppedStderr: 0, DroppedCombined: 7,
		Total: 17,
	}
	if got := c.Sizes(); got != want {
		t.Fatalf("sizes %+v, want %+v", got, want)
	}
	for sel, w := range map[Selector]string{Both: "12345678ab", StdoutOnly: "12345678XY", StderrOnly: "abcdef"} {
		if got := readAll(t, c, sel); string(got) != w {
			t.Errorf("%v: %q, want %q", sel, got, w)
		}
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	// Writes after Close are counted, not stored.
	c.Close()
	c.Write(sandbox.Stderr, []byte("late"))
	if s := c.Sizes(); s.DroppedStderr != 4 || s.Stderr != 6 {
		t.Fatalf("after close %+v", s)
	}
	c.SetDropped(100, 200)
	if s := c.Sizes(); s.DroppedStdout != 100 || s.DroppedStderr != 200 || s.Total != 316 {
		t.Fatalf("after SetDropped %+v", s)
	}
}

func TestReadCursorEdges(t *testing.T) {
	c := openT(t, t.TempDir(), 1<<20, 16)
	c.Write(sandbox.Stdout, []byte("hello"))
	tests := []struct {
		name     string
		cursor   int64
		max      int
		want     string
		wantNext int64
		wantErr  bool
	}{
		{"start", 0, 3, "hel", 3, false},
		{"middle", 2, 100, "llo", 5, false},
		{"at end", 5, 10, "", 5, false},
		{"past end clamps", 50, 10, "", 5, false},
		{"zero max", 1, 0, "", 1, false},
		{"negative cursor", -1, 10, "", -1, true},
		{"negative max", 0, -1, "", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, next, err := c.Read(StdoutOnly, tc.cursor, tc.max)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			if string(data) != tc.want || next != tc.wantNext {
				t.Fatalf("got %q next %d, want %q next %d", data, next, tc.want, tc.wantNext)
			}
		})
	}
	if _, _, err := c.Read(Selector(9), 0, 1); err == nil {
		t.Fatal("bad selector accepted")
	}
}

func TestParseSelector(t *testing.T) {
	for in, want := range map[string]Selector{"both": Both, "stdout": StdoutOnly, "stderr": StderrOnly} {
		got, err := ParseSelector(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseSelector(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "Both", "out", "combined"} {
		if _, err := ParseSelector(in); err == nil {
			t.Errorf("ParseSelector(%q) accepted", in)
		}
	}
}

func TestChangedWakes(t *testing.T) {
	c := openT(t, t.TempDir(), 1<<20, 16)
	wait := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}

	ch := c.Changed()
	select {
	case <-ch:
		t.Fatal("woke before any write")
	default:
	}
	go c.Write(sandbox.Stdout, []byte("x"))
	if !wait(ch) {
		t.Fatal("Write did not wake the waiter")
	}

	ch = c.Changed()
	go c.Close()
	if !wait(ch) {
		t.Fatal("Close did not wake the waiter")
	}
	if !c.Closed() {
		t.Fatal("not Closed after Close")
	}
	// After Close, Changed never blocks.
	if !wait(c.Changed()) {
		t.Fatal("Changed blocks after Close")
	}
}

func TestConcurrentWritersAndReaders(t *testing.T) {
	c := openT(t, t.TempDir(), 1<<20, 512)
	const writers, lines = 4, 300

	var wg sync.WaitGroup
	// A follower reads by cursor until the capture is closed and drained.
	var followed []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		var cur int64
		for {
			ch := c.Changed()
			closed := c.Closed()
			data, next, err := c.Read(Both, cur, 333)
			if err != nil {
				t.Error(err)
				return
			}
			followed = append(followed, data...)
			cur = next
			if len(data) > 0 {
				continue
			}
			if closed {
				return
			}
			<-ch
		}
	}()
	// Other readers poke at the tail and sizes meanwhile.
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := c.Tail(StdoutOnly, 3, 200); err != nil {
					t.Error(err)
					return
				}
				_ = c.Sizes()
			}
		}()
	}

	var ww sync.WaitGroup
	for w := range writers {
		ww.Add(1)
		go func() {
			defer ww.Done()
			stream := sandbox.Stream(1 + w%2)
			for i := range lines {
				c.Write(stream, fmt.Appendf(nil, "w%d line %d\n", w, i))
			}
		}()
	}
	ww.Wait()
	c.Close()
	close(stop)
	wg.Wait()

	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	all := readAll(t, c, Both)
	if !bytes.Equal(followed, all) {
		t.Fatalf("follower got %d bytes, file has %d", len(followed), len(all))
	}
	// Each writer's lines appear complete and in order.
	next := make([]int, writers)
	for _, line := range strings.Split(strings.TrimSuffix(string(all), "\n"), "\n") {
		var w, i int
		if _, err := fmt.Sscanf(line, "w%d line %d", &w, &i); err != nil || i != next[w] {
			t.Fatalf("line %q out of order (want %d)", line, next[w])
		}
		next[w]++
	}
	s := c.Sizes()
	if s.Combined != s.Stdout+s.Stderr || s.Total != s.Combined {
		t.Fatalf("sizes %+v", s)
	}
}

func TestTail(t *testing.T) {
	var thousand strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&thousand, "line %d\n", i)
	}
	tests := []struct {
		name      string
		input     string
		lines     int
		max       int
		want      string
		wantStart int64
	}{
		{"last 2 of 1000", thousand.String(), 2, 1 << 20, "line 998\nline 999\n", int64(thousand.Len() - 18)},
		{"no trailing newline", "a\nb\nc", 2, 100, "b\nc", 2},
		{"one line no newline", "abc", 1, 100, "abc", 0},
		{"more lines than exist", "a\nb\n", 10, 100, "a\nb\n", 0},
		{"blank lines count", "a\n\n\nb\n", 2, 100, "\nb\n", 3},
		{"max bytes keeps end", "aaaa\nbbbbbbbbbb\n", 1, 5, "bbbb\n", 11},
		{"only newline", "\n", 1, 100, "\n", 0},
		{"zero lines", "a\nb\n", 0, 100, "", 4},
		{"empty", "", 3, 100, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := openT(t, t.TempDir(), 1<<30, 0) // no ring: exercise the disk path
			c.Write(sandbox.Stdout, []byte(tc.input))
			for _, sel := range []Selector{Both, StdoutOnly} {
				data, start, err := c.Tail(sel, tc.lines, tc.max)
				if err != nil {
					t.Fatal(err)
				}
				if string(data) != tc.want || start != tc.wantStart {
					t.Fatalf("%v: got %q at %d, want %q at %d", sel, data, start, tc.want, tc.wantStart)
				}
			}
		})
	}
}

func TestTailAcrossChunks(t *testing.T) {
	c := openT(t, t.TempDir(), 1<<30, 1000)
	long := strings.Repeat("x", 3*tailChunk+17)
	c.Write(sandbox.Stderr, []byte("first\n"+long+"\nlast"))
	data, start, err := c.Tail(StderrOnly, 2, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != long+"\nlast" || start != 6 {
		t.Fatalf("got %d bytes at %d", len(data), start)
	}
}

func TestHugeSingleWrite(t *testing.T) {
	const size = 50 << 20
	c := openT(t, t.TempDir(), 64<<20, 1<<20)
	p := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	c.Write(sandbox.Stdout, p)
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	begin := time.Now()
	for _, sel := range []Selector{Both, StdoutOnly} {
		data, start, err := c.Tail(sel, 1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != 1000 || start != size-1000 || !bytes.Equal(data, p[size-1000:]) {
			t.Fatalf("%v: got %d bytes at %d", sel, len(data), start)
		}
	}
	if d := time.Since(begin); d > 5*time.Second { // bounded, not a scan of the whole log
		t.Fatalf("Tail took %v", d)
	}
	// A read far back comes from disk.
	data, next, err := c.Read(StdoutOnly, 16, 16)
	if err != nil || string(data) != "0123456789abcdef" || next != 32 {
		t.Fatalf("Read: %q %d %v", data, next, err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(t.TempDir(), 0, 10); err == nil {
		t.Error("maxBytes 0 accepted")
	}
	if _, err := Open(t.TempDir(), 10, -1); err == nil {
		t.Error("negative ringBytes accepted")
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o600)
	if _, err := Open(file, 10, 10); err == nil {
		t.Error("file as directory accepted")
	}
}

func TestWriteErrorRecorded(t *testing.T) {
	c := openT(t, t.TempDir(), 1<<20, 16)
	c.Write(sandbox.Stdout, []byte("ok\n"))
	c.files[1].Close() // make the next stdout.log write fail
	c.Write(sandbox.Stdout, []byte("lost\n"))
	if c.Err() == nil {
		t.Fatal("I/O error not recorded")
	}
	s := c.Sizes()
	if s.Stdout != 3 || s.DroppedStdout != 5 || s.Combined != 8 {
		t.Fatalf("sizes %+v", s)
	}
	if got := readAll(t, c, Both); string(got) != "ok\nlost\n" {
		t.Fatalf("combined %q", got)
	}
}

// A server killed between a write's two appends (combined.log, then the
// stream's file) leaves combined.log one chunk ahead; resuming trims it, so
// the replay of that chunk is stored once.
func TestTrimTornWrite(t *testing.T) {
	dir := t.TempDir()
	c := openT(t, dir, 1<<20, 64)
	c.Write(sandbox.Stdout, []byte("line1\n"))
	c.Write(sandbox.Stderr, []byte("err1\n"))
	c.Close()
	// The crash: "err2\n" reached combined.log only.
	f, err := os.OpenFile(filepath.Join(dir, "combined.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("err2\n")
	f.Close()

	c2 := openT(t, dir, 1<<20, 64)
	if err := c2.TrimTornWrite(); err != nil {
		t.Fatal(err)
	}
	if s := c2.Sizes(); s.Combined != 11 {
		t.Fatalf("after the trim: %+v, want combined 11", s)
	}
	c2.Write(sandbox.Stderr, []byte("err2\n")) // the replay
	if got := string(readAll(t, c2, Both)); got != "line1\nerr1\nerr2\n" {
		t.Fatalf("combined after the replay: %q", got)
	}
	buf := make([]byte, 16)
	if !c2.ring.readAt(buf, 0) || string(buf) != "line1\nerr1\nerr2\n" {
		t.Fatalf("ring after the trim: %q", buf)
	}
	// A consistent capture is left alone.
	if err := c2.TrimTornWrite(); err != nil || c2.Sizes().Combined != 16 {
		t.Fatalf("second trim: %v, %+v", err, c2.Sizes())
	}
}
