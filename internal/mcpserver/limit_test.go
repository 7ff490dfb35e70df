package mcpserver

import (
	"io"
	"strings"
	"testing"
)

func TestLineLimiter(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	in := "{\"a\":1}\n" + big + "\n{\"b\":2}\n" + big // last oversize line has no newline
	got, err := io.ReadAll(newLineLimiter(strings.NewReader(in), 200<<10))
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"a\":1}\n" + oversizeLine + "{\"b\":2}\n" + oversizeLine
	if string(got) != want {
		t.Fatalf("got %q", truncateForTest(string(got)))
	}
	// Lines under the limit, including long ones past the reader's buffer, pass unchanged.
	long := strings.Repeat("y", 150<<10) + "\n"
	got, _ = io.ReadAll(newLineLimiter(strings.NewReader(long+"z"), 200<<10))
	if string(got) != long+"z" {
		t.Fatalf("long line altered: %d bytes", len(got))
	}
}

func truncateForTest(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
