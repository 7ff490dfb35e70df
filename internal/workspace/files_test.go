package workspace

import (
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt": "a.txt", "./a/b/": "a/b", "/workspace": ".", "/workspace/": ".", "/workspace/x/y": "x/y",
		".": ".", "a//b": "a/b", "/workspace/./a": "a",
	} {
		if got, err := CleanPath("path", in); err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"": "empty", "../x": "'..'", "a/../../etc/passwd": "'..'", "/workspace/../etc": "'..'",
		"/etc/passwd": "outside /workspace", "/workspacex/a": "outside /workspace", "a\x00b": "NUL",
		strings.Repeat("a", MaxPathBytes+1): "limit",
	} {
		_, err := CleanPath("path", in)
		if err == nil || !strings.Contains(err.Error(), msg) || !strings.HasPrefix(err.Error(), "path ") {
			t.Errorf("CleanPath(%q): %v; want an error with %q", in, err, msg)
		}
	}
}
