package supervisor

import (
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

func frame(t *testing.T, h proto.FileHeader, part string) []byte {
	t.Helper()
	p, err := proto.EncodeFile(h, []byte(part))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReturnedFilesAreChecked: File frames come from inside the sandbox; a
// bad path, a part out of order, an oversize figure or a second copy is
// dropped, and only whole files are handed over.
func TestReturnedFilesAreChecked(t *testing.T) {
	var r returnedFiles
	for _, h := range []proto.FileHeader{
		{Path: "../etc/passwd", Kind: proto.KindFile, Size: 1},
		{Path: "/etc/passwd", Kind: proto.KindFile, Size: 1},
		{Path: "a/./b", Kind: proto.KindFile, Size: 1},
		{Path: "dir/fig.png", Kind: proto.KindFigure, Size: 1},
		{Path: "fig.txt", Kind: proto.KindFigure, Size: 1},
		{Path: "big.png", Kind: proto.KindFigure, Size: proto.MaxFigureBytes + 1},
		{Path: "x", Kind: "other", Size: 1},
		{Path: "neg", Kind: proto.KindFile, Size: -1},
	} {
		if _, ok := r.add(frame(t, h, "x")); ok || len(r.files) != 0 {
			t.Errorf("took %+v", h)
		}
	}
	// A file in two parts is whole after the second; a part out of order is dropped.
	if _, ok := r.add(frame(t, proto.FileHeader{Path: "out/a.csv", Kind: proto.KindFile, Size: 6}, "abc")); ok {
		t.Error("half a file reported whole")
	}
	if _, ok := r.add(frame(t, proto.FileHeader{Path: "out/a.csv", Kind: proto.KindFile, Size: 6, Offset: 4}, "ef")); ok {
		t.Error("a part out of order was taken")
	}
	f, ok := r.add(frame(t, proto.FileHeader{Path: "out/a.csv", Kind: proto.KindFile, Size: 6, Offset: 3}, "def"))
	if !ok || string(f.Data) != "abcdef" {
		t.Errorf("whole file: %q %v", f.Data, ok)
	}
	if _, ok := r.add(frame(t, proto.FileHeader{Path: "out/a.csv", Kind: proto.KindFile, Size: 1}, "z")); ok {
		t.Error("a second copy was taken")
	}
	r.add(frame(t, proto.FileHeader{Path: "cut.bin", Kind: proto.KindFile, Size: 10}, "12345"))
	if _, ok := r.add(frame(t, proto.FileHeader{Path: "fig-1.png", Kind: proto.KindFigure, Size: 3}, "PNG")); !ok {
		t.Error("a figure was not taken")
	}
	var whole []string
	for _, f := range r.whole() {
		whole = append(whole, f.Path)
	}
	if len(whole) != 2 || whole[0] != "out/a.csv" || whole[1] != "fig-1.png" {
		t.Errorf("whole files: %v (cut.bin never completed)", whole)
	}
}
