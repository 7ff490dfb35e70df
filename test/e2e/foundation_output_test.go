package e2e

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

const (
	fInlineBytes = 16 << 10 // policy default output.inline_bytes
	// fMaxFloodGrowth bounds what the floods add to the server's resident
	// memory (kB): they push well over 100 MiB through it, of which it keeps
	// 16 MiB a job. Growth, not an absolute figure: the race-detector build
	// this runs under starts at ~170 MB by itself, and that moves with code.
	fMaxFloodGrowth = 100 << 10
)

// fCheckFlood checks one stream of a `yes` flood: head and tail of "y" lines
// around a single "bytes omitted" marker, about the inline cap in all.
func fCheckFlood(t *testing.T, what, out string) {
	t.Helper()
	if n := len(out); n < fInlineBytes || n > fInlineBytes+100 {
		t.Errorf("%s: inline text is %d bytes, want the 16 KiB cap plus a marker (%d..%d)", what, n, fInlineBytes, fInlineBytes+100)
	}
	if c := strings.Count(out, "bytes omitted"); c != 1 {
		t.Fatalf("%s: %d 'bytes omitted' markers in the inline text, want 1: %s", what, c, fShort(out))
	}
	i := strings.Index(out, "\n... [")
	j := strings.Index(out, "bytes omitted] ...\n")
	if i < 0 || j < i {
		t.Fatalf("%s: marker is not the '\\n... [N bytes omitted] ...\\n' line: %s", what, fShort(out))
	}
	head, tail := out[:i], out[j+len("bytes omitted] ...\n"):]
	if !strings.HasPrefix(head, "y") || strings.Trim(head, "y\n") != "" || len(head) < fInlineBytes/2-4 {
		t.Errorf("%s: head is %d bytes, want ~8 KiB of 'y' lines: %s", what, len(head), fShort(head))
	}
	if strings.Trim(tail, "y\n") != "" || len(tail) < fInlineBytes/2-4 {
		t.Errorf("%s: tail is %d bytes, want ~8 KiB of 'y' lines: %s", what, len(tail), fShort(tail))
	}
}

func TestFoundationOutputFloodBounded(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	pid := s.cmd.Process.Pid
	base := fProcStatusKB(t, pid, "VmRSS")
	for _, tc := range []struct {
		name, command, stream, other string
	}{
		{"yes", "yes", "stdout", "stderr"},
		{"yes >&2", "yes >&2", "stderr", "stdout"},
		// The engine's log copier handles output line by line, which holds
		// plain `yes` to a few MB here; 4 KiB lines push ~100 MB through,
		// well past the 16 MiB the server keeps of one job.
		{"yes 4 KiB lines", `yes "$(head -c 4095 /dev/zero | tr '\0' y)"`, "stdout", "stderr"},
	} {
		start := time.Now()
		r := fRun(s, map[string]any{"command": tc.command, "timeout_s": 3})
		took := time.Since(start)
		if took > 20*time.Second {
			t.Errorf("%s: timeout_s 3 returned after %s, want it bounded (<= 20 s)", tc.name, took)
		}
		status := str(r, "status")
		if status == "running" {
			// The call waits timeout + a slack for the end; on a busy machine
			// the flooding sandbox's teardown can outlast that: the job still
			// ends timed out.
			status = str(s.ok("get_job", map[string]any{"job_id": str(r, "job_id"), "wait_s": 30}), "status")
		}
		if status != "timed_out" {
			t.Errorf("%s: want status timed_out, got %q (%v)", tc.name, status, r["reason"])
		}
		if r["truncated"] != true {
			t.Errorf("%s: want truncated true, got %v", tc.name, r["truncated"])
		}
		if fNum(r, "omitted_bytes") <= 0 {
			t.Errorf("%s: want omitted_bytes > 0, got %v", tc.name, r["omitted_bytes"])
		}
		fCheckFlood(t, tc.name+" "+tc.stream, str(r, tc.stream))
		if o := str(r, tc.other); o != "" {
			t.Errorf("%s: %s should be empty, got %s", tc.name, tc.other, fShort(o))
		}
		t.Logf("%s: %s in %s, omitted_bytes %.0f dropped_bytes %.0f; server VmRSS %d kB VmHWM %d kB",
			tc.name, str(r, "status"), took.Round(100*time.Millisecond), fNum(r, "omitted_bytes"), fNum(r, "dropped_bytes"),
			fProcStatusKB(t, pid, "VmRSS"), fProcStatusKB(t, pid, "VmHWM"))
	}
	if hwm := fProcStatusKB(t, pid, "VmHWM"); hwm-base > fMaxFloodGrowth {
		t.Errorf("server peak RSS (VmHWM) is %d kB after the output floods, %d kB over its %d kB at start; want under %d kB more", hwm, hwm-base, base, fMaxFloodGrowth)
	}
	if rss := fProcStatusKB(t, pid, "VmRSS"); rss-base > fMaxFloodGrowth {
		t.Errorf("server RSS is %d kB after the output floods, %d kB over its %d kB at start; want under %d kB more", rss, rss-base, base, fMaxFloodGrowth)
	}
	s.waitNoContainers(10 * time.Second)
}

func TestFoundationBinaryAndEscapes(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	res := s.call("run_command", map[string]any{"command": "head -c 4096 /dev/urandom"})
	if res.IsError {
		t.Fatalf("binary output: tool error %s", text(res))
	}
	r := structured(t, res)
	out := str(r, "stdout")
	if str(r, "status") != "completed" || r["lossy"] != true {
		t.Errorf("binary output: want completed and lossy true, got status %q lossy %v", str(r, "status"), r["lossy"])
	}
	if !utf8.ValidString(out) || strings.ContainsRune(out, 0) || len(out) < 1000 {
		t.Errorf("binary output: stdout should be %d+ bytes of valid UTF-8 without NUL, got %d bytes (valid %v)", 1000, len(out), utf8.ValidString(out))
	}

	res = s.call("run_command", map[string]any{"command": `printf '\033[31mred\033[0m \033]0;title\007'; printf '\033[1mbold\033[0m\n' >&2`})
	if res.IsError {
		t.Fatalf("escape output: tool error %s", text(res))
	}
	r = structured(t, res)
	for _, part := range []struct{ name, s string }{{"stdout", str(r, "stdout")}, {"stderr", str(r, "stderr")}, {"text content", text(res)}} {
		if strings.ContainsAny(part.s, "\x1b\x07\u009b") {
			t.Errorf("escape output: %s still holds ESC/BEL/CSI bytes: %q", part.name, part.s)
		}
	}
	if o := str(r, "stdout"); !strings.Contains(o, "red") || strings.Contains(o, "title") || strings.Contains(o, "[31m") {
		t.Errorf("escape output: stdout %q, want 'red ' without the sequences or the window title", o)
	}
	if e := str(r, "stderr"); e != "bold\n" {
		t.Errorf("escape output: stderr %q, want %q", e, "bold\n")
	}
	if r["lossy"] == true {
		t.Errorf("escape output: lossy should not be set for valid UTF-8 text")
	}
}
