package proto

import (
	"encoding/json"
	"testing"
)

func TestNamesTravelByteForByte(t *testing.T) {
	for _, name := range []string{"plain.txt", "caf\xe9", "new\nline", "\xff\xfe", "x\x00b64:AAAA", "\x00b64:eA=="} {
		in := Change{Path: name, Target: name, Change: "added"}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out Change
		if err := json.Unmarshal(b, &out); err != nil || out.Path != name || out.Target != name {
			t.Fatalf("%q: got %q %q (%v) from %s", name, out.Path, out.Target, err, b)
		}
		be := BaselineEntry{Path: name, Target: name}
		b, _ = json.Marshal(be)
		var got BaselineEntry
		if err := json.Unmarshal(b, &got); err != nil || got != be {
			t.Fatalf("%q: baseline entry %+v (%v) from %s", name, got, err, b)
		}
	}
}
