package proto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	frames := []struct {
		typ byte
		p   []byte
	}{
		{TypeHello, []byte(`{"protocol":1}`)},
		{TypeStdout, []byte("hello\n")},
		{TypeEOF, nil},
		{TypeData, bytes.Repeat([]byte{0xff}, MaxPayload)},
		{TypeStderr, []byte{}},
	}
	for _, f := range frames {
		if err := WriteFrame(&buf, f.typ, f.p); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(&buf)
	for i, f := range frames {
		typ, p, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if typ != f.typ || !bytes.Equal(p, f.p) {
			t.Fatalf("frame %d: got %s len %d, want %s len %d", i, TypeName(typ), len(p), TypeName(f.typ), len(f.p))
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

func TestSplitReads(t *testing.T) {
	var buf bytes.Buffer
	for i := 0; i < 50; i++ {
		WriteFrame(&buf, TypeData, bytes.Repeat([]byte{byte(i)}, i*37))
	}
	r := NewReader(iotest.OneByteReader(bytes.NewReader(buf.Bytes())))
	for i := 0; i < 50; i++ {
		typ, p, err := r.Next()
		if err != nil || typ != TypeData || len(p) != i*37 {
			t.Fatalf("frame %d: typ %q len %d err %v", i, typ, len(p), err)
		}
	}
	// Half reads and a data-with-EOF reader too.
	r = NewReader(iotest.DataErrReader(iotest.HalfReader(bytes.NewReader(buf.Bytes()))))
	for i := 0; i < 50; i++ {
		if _, p, err := r.Next(); err != nil || len(p) != i*37 {
			t.Fatalf("frame %d: len %d err %v", i, len(p), err)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestOversize(t *testing.T) {
	if err := WriteFrame(io.Discard, TypeData, make([]byte, MaxPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("write oversize: %v", err)
	}
	hdr := []byte{TypeData, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], MaxPayload+1)
	if _, _, err := NewReader(bytes.NewReader(hdr)).Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("read oversize: %v", err)
	}
	binary.BigEndian.PutUint32(hdr[1:], 0xffffffff)
	if _, _, err := NewReader(bytes.NewReader(hdr)).Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("read 4 GiB: %v", err)
	}
}

func TestTruncated(t *testing.T) {
	for _, in := range [][]byte{
		{TypeData},
		{TypeData, 0, 0},
		{TypeData, 0, 0, 0, 5, 'a', 'b'},
	} {
		if _, _, err := NewReader(bytes.NewReader(in)).Next(); err != io.ErrUnexpectedEOF {
			t.Fatalf("%v: got %v, want io.ErrUnexpectedEOF", in, err)
		}
	}
}

func TestGarbage(t *testing.T) {
	// Random-looking bytes either parse as frames or fail cleanly.
	garbage := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\x00\x00\x00\x00\xff\xff")
	r := NewReader(bytes.NewReader(garbage))
	for i := 0; i < 100; i++ {
		if _, _, err := r.Next(); err != nil {
			return
		}
	}
	t.Fatal("reader did not stop on garbage")
}

func TestDecodeSpec(t *testing.T) {
	good := `{"argv":["sh","-c","echo hi"],"env":["PATH=/bin"],"stdin":"pipe","timeout_ms":1000,"rlimits":{"nofile":64},"tty":{"rows":24,"cols":80},"kill_mode":"tree"}`
	s, err := DecodeSpec([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Argv[2] != "echo hi" || s.TTY.Rows != 24 || s.Rlimits["nofile"] != 64 || s.KillMode != KillTree {
		t.Fatalf("decoded %+v", s)
	}
	bad := map[string]string{
		"not json":       `{"argv":`,
		"empty argv":     `{"argv":[],"kill_mode":"tree"}`,
		"unknown field":  `{"argv":["x"],"kill_mode":"tree","privileged":true}`,
		"trailing":       `{"argv":["x"],"kill_mode":"tree"} {}`,
		"nul argv":       `{"argv":["x\u0000y"],"kill_mode":"tree"}`,
		"bad env":        `{"argv":["x"],"env":["=x"],"kill_mode":"tree"}`,
		"env no equals":  `{"argv":["x"],"env":["FOO"],"kill_mode":"tree"}`,
		"bad stdin":      `{"argv":["x"],"stdin":"tty","kill_mode":"tree"}`,
		"no kill mode":   `{"argv":["x"]}`,
		"bad kill mode":  `{"argv":["x"],"kill_mode":"host"}`,
		"neg timeout":    `{"argv":["x"],"kill_mode":"tree","timeout_ms":-1}`,
		"neg grace":      `{"argv":["x"],"kill_mode":"tree","grace_ms":-1}`,
		"unknown rlimit": `{"argv":["x"],"kill_mode":"tree","rlimits":{"as":1}}`,
		"zero tty":       `{"argv":["x"],"kill_mode":"tree","tty":{"rows":0,"cols":80}}`,
		"wrong type":     `{"argv":"x","kill_mode":"tree"}`,
	}
	for name, in := range bad {
		if _, err := DecodeSpec([]byte(in)); err == nil {
			t.Errorf("%s: accepted %s", name, in)
		} else if !strings.HasPrefix(err.Error(), "spec: ") {
			t.Errorf("%s: error %q lacks the spec: prefix", name, err)
		}
	}
}

func TestDecodeResize(t *testing.T) {
	if r, err := DecodeResize([]byte(`{"rows":50,"cols":132}`)); err != nil || r.Rows != 50 || r.Cols != 132 {
		t.Fatalf("%+v %v", r, err)
	}
	for _, in := range []string{``, `{"rows":0,"cols":1}`, `{"rows":70000,"cols":1}`, `[]`} {
		if _, err := DecodeResize([]byte(in)); err == nil {
			t.Errorf("accepted %q", in)
		}
	}
}

// FuzzReader: no input makes the reader panic, loop forever or return a
// payload larger than MaxPayload; a clean stream re-encodes to itself.
func FuzzReader(f *testing.F) {
	var seed bytes.Buffer
	WriteFrame(&seed, TypeSpec, []byte(`{"argv":["true"],"kill_mode":"tree"}`))
	WriteFrame(&seed, TypeData, []byte("abc"))
	WriteFrame(&seed, TypeEOF, nil)
	f.Add(seed.Bytes())
	f.Add([]byte{TypeData, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{TypeData, 0, 0x10, 0, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		var out bytes.Buffer
		for i := 0; ; i++ {
			if i > len(in) {
				t.Fatal("more frames than input bytes")
			}
			typ, p, err := r.Next()
			if err != nil {
				if err == io.EOF && !bytes.Equal(out.Bytes(), in) {
					t.Fatal("clean EOF but re-encoding differs")
				}
				return
			}
			if len(p) > MaxPayload {
				t.Fatal("payload over MaxPayload")
			}
			WriteFrame(&out, typ, p)
			if typ == TypeSpec {
				DecodeSpec(p) // must not panic
			}
			if typ == TypeResize {
				DecodeResize(p)
			}
		}
	})
}

// Joined mid-frame, a reader finds the next frame and reads on from there.
func TestResync(t *testing.T) {
	var b bytes.Buffer
	WriteFrame(&b, TypeStdout, []byte("first frame, joined in the middle"))
	WriteJSON(&b, TypeExit, Exit{ExitCode: 4})
	WriteFrame(&b, TypeStderr, []byte("after"))
	stream := b.Bytes()[9:] // inside the first payload
	r := Resync(bufio.NewReader(bytes.NewReader(stream)))
	typ, p, err := r.Next()
	if err != nil || typ != TypeExit || !strings.Contains(string(p), `"exit_code":4`) {
		t.Fatalf("first frame after resync: %q %q %v", typ, p, err)
	}
	if typ, p, err := r.Next(); err != nil || typ != TypeStderr || string(p) != "after" {
		t.Fatalf("next: %q %q %v", typ, p, err)
	}
	// At a boundary it takes the first frame as it is.
	r = Resync(bufio.NewReader(bytes.NewReader(b.Bytes())))
	if typ, _, err := r.Next(); err != nil || typ != TypeStdout {
		t.Fatalf("at a boundary: %q %v", typ, err)
	}
}
