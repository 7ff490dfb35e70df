package mcpserver

import (
	"bytes"
	"testing"
)

func TestProgressWriterCountsPerToken(t *testing.T) {
	var out bytes.Buffer
	w := newProgressWriter(&out)
	lines := []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"a","progress":1}}` + "\n",
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n",
	}
	for _, l := range lines {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if out.String() != lines[0]+lines[1]+lines[2] {
		t.Fatal("output not passed through unchanged")
	}
	if w.written[tokenKey("a")] != 1 || w.written[tokenKey(7)] != 1 {
		t.Fatalf("counts: %v", w.written)
	}
}
