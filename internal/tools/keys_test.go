package tools

import (
	"strings"
	"testing"
)

func TestEncodeKeys(t *testing.T) {
	for _, c := range []struct {
		keys []string
		want string
	}{
		{[]string{"ctrl_c"}, "\x03"},
		{[]string{"ctrl_d"}, "\x04"},
		{[]string{"ctrl_z"}, "\x1a"},
		{[]string{"ctrl_l"}, "\x0c"},
		{[]string{"tab", "tab"}, "\t\t"},
		{[]string{"escape"}, "\x1b"},
		{[]string{"up", "down", "right", "left"}, "\x1b[A\x1b[B\x1b[C\x1b[D"},
		{[]string{"home", "end"}, "\x1b[H\x1b[F"},
		{[]string{"enter"}, "\r"},
		{[]string{"backspace"}, "\x7f"},
		{[]string{"page_up", "page_down"}, "\x1b[5~\x1b[6~"},
		{nil, ""},
	} {
		got, err := encodeKeys(c.keys)
		if err != nil || string(got) != c.want {
			t.Errorf("encodeKeys(%q) = %q, %v; want %q", c.keys, got, err, c.want)
		}
	}
	if len(keyNames) != len(keyBytes) {
		t.Fatalf("keyNames lists %d keys, keyBytes maps %d", len(keyNames), len(keyBytes))
	}
	for _, k := range keyNames {
		if _, ok := keyBytes[k]; !ok {
			t.Errorf("key %q listed but not mapped", k)
		}
	}
	_, err := encodeKeys([]string{"up", "ctrl_x"})
	if err == nil || !strings.Contains(err.Error(), `"ctrl_x"`) || !strings.Contains(err.Error(), "ctrl_c") {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := encodeKeys(make([]string, maxKeys+1)); err == nil {
		t.Error("too many keys accepted")
	}
}
