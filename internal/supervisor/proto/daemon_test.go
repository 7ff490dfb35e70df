package proto

import (
	"bytes"
	"strings"
	"testing"
)

// A Mux frame carries a channel's key and one inner frame, both ways whole.
func TestMuxRoundTrip(t *testing.T) {
	f, err := AppendMux(nil, "job-1", TypeStdout, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	typ, p, err := NewReader(bytes.NewReader(f)).Next()
	if err != nil || typ != TypeMux {
		t.Fatalf("outer frame: %q %v", typ, err)
	}
	key, inner, payload, err := DecodeMux(p)
	if err != nil || key != "job-1" || inner != TypeStdout || string(payload) != "hello" {
		t.Fatalf("DecodeMux = %q %q %q %v", key, inner, payload, err)
	}
	if _, err := AppendMux(nil, "", TypeSpec, nil); err == nil {
		t.Error("empty key accepted")
	}
	if _, err := AppendMux(nil, strings.Repeat("k", MaxKey+1), TypeSpec, nil); err == nil {
		t.Error("key over MaxKey accepted")
	}
	for _, bad := range [][]byte{nil, {0}, {5, 'a', 'b'}} {
		if _, _, _, err := DecodeMux(bad); err == nil {
			t.Errorf("DecodeMux(%q) accepted", bad)
		}
	}
}
