package e2e

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// send_input to a job that never reads its stdin returns within its wait,
// says how much went in, and other calls are answered meanwhile.
func TestSendInputToAJobThatDoesNotRead(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	id := str(s.ok("run_command", map[string]any{"command": "echo started; exec sleep 60", "background": true}), "job_id")
	// "running" holds from the moment a slot is taken, while the sandbox may
	// still be starting (seconds on a busy machine): wait for the process.
	if rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "started", "wait_s": 50}); rd["matched"] != true {
		t.Fatalf("the job never started: %v", rd)
	}

	var wg sync.WaitGroup
	var others []time.Duration
	var mu sync.Mutex
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // another agent's calls, while the send is stuck
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			s.ok("get_job", map[string]any{"job_id": id})
			mu.Lock()
			others = append(others, time.Since(start))
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	start := time.Now()
	r := s.ok("send_input", map[string]any{"job_id": id, "text": strings.Repeat("x", 1<<20), "wait_s": 2})
	took := time.Since(start)
	close(stop)
	wg.Wait()
	// wait_s is 2: a bound of 4× that (and then some) tells "bounded" from "hung"
	// on a busy machine; how fast it is belongs in the bench.
	if took > 10*time.Second {
		t.Errorf("send_input of 1 MiB to a job that does not read took %s, want it bounded by its wait (2 s), well within 10 s", took)
	}
	written := num(t, r, "bytes_written")
	if written <= 0 || written >= 1<<20 {
		t.Errorf("bytes_written %v, want some but not all of 1 MiB", written)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(others) < 5 {
		t.Errorf("only %d other calls were answered while send_input waited", len(others))
	}
	for _, d := range others {
		if d > 4*time.Second {
			t.Errorf("a get_job took %s while send_input waited: it was held up by the send", d)
		}
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL"})
}

// Output cut to head and tail names the range left out and the cursor that
// reads it; reading there returns exactly the missing middle.
func TestTruncatedOutputIsReachable(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "seq 1 20000"})
	omitted, ok := r["omitted"].([]any)
	if r["truncated"] != true || !ok || len(omitted) != 1 {
		t.Fatalf("seq 1 20000: want one omitted range, got %v", r["omitted"])
	}
	rng := omitted[0].(map[string]any)
	startB, endB := num(t, rng, "start"), num(t, rng, "end")
	var all strings.Builder
	for i := 1; i <= 20000; i++ {
		all.WriteString(strconv.Itoa(i) + "\n")
	}
	whole := all.String()
	head, rest := str(r, "stdout"), whole[int(endB):]
	if !strings.HasPrefix(head, whole[:int(startB)]) || !strings.HasSuffix(head, rest) {
		t.Fatalf("inline output is not head %d bytes + marker + tail from %d", int(startB), int(endB))
	}
	if !strings.HasSuffix(whole[:int(startB)], "\n") || !strings.HasSuffix(whole[:int(endB)], "\n") {
		t.Errorf("head or tail does not break at a line: range %v–%v", startB, endB)
	}
	middle := ""
	cursor := startB
	for cursor < endB {
		page := s.ok("read_output", map[string]any{"job_id": str(r, "job_id"), "stream": "stdout", "cursor": cursor, "max_bytes": int(endB - cursor)})
		middle += str(page, "output")
		if num(t, page, "next_cursor") <= cursor {
			t.Fatal("read_output made no progress")
		}
		cursor = num(t, page, "next_cursor")
	}
	if middle != whole[int(startB):int(endB)] {
		t.Errorf("reading the omitted range gave %d bytes, want exactly the %d missing", len(middle), int(endB-startB))
	}
	// The call's text says where the rest is, too.
	res := s.call("run_command", map[string]any{"command": "seq 1 20000"})
	if txt := text(res); !strings.Contains(txt, "left out: read_output with stream \"stdout\" and cursor ") {
		t.Errorf("the text does not say how to read what was left out:\n%s", tail(txt, 300))
	}
}

// Paging multi-byte output with a small max_bytes returns, joined, exactly
// the bytes written, and no page holds a broken character; a cursor past
// the end does not move next_cursor back.
func TestPagingKeepsCharactersWhole(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	id := str(s.ok("run_command", map[string]any{"command": "printf 'é%.0s' {1..5000}"}), "job_id")
	var joined strings.Builder
	cursor := 0.0
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging did not end")
		}
		page := s.ok("read_output", map[string]any{"job_id": id, "cursor": cursor, "max_bytes": 333})
		out := str(page, "output")
		if !utf8.ValidString(out) || strings.ContainsRune(out, utf8.RuneError) || page["lossy"] == true {
			t.Fatalf("page at %v holds a broken character: %q", cursor, tail(out, 20))
		}
		joined.WriteString(out)
		next := num(t, page, "next_cursor")
		if next == cursor {
			break
		}
		cursor = next
	}
	if joined.String() != strings.Repeat("é", 5000) {
		t.Fatalf("joined pages: %d bytes, want the 10000 written", joined.Len())
	}
	past := s.ok("read_output", map[string]any{"job_id": id, "cursor": 20000})
	if num(t, past, "next_cursor") != 20000 || str(past, "output") != "" {
		t.Errorf("a cursor past the end: %v", past)
	}
}

// Names that change how the shell or the loader start are refused, each
// naming itself.
func TestEnvNamesThatChangeTheShellAreRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, name := range []string{"PATH", "BASH_ENV", "ENV", "LD_PRELOAD", "SHELLOPTS", "IFS"} {
		msg := s.toolErr("run_command", map[string]any{"command": "true", "env": map[string]any{name: "/x"}})
		if !strings.Contains(msg, name) {
			t.Errorf("env %s refused with %q, which does not name it", name, msg)
		}
	}
	if r := s.ok("run_command", map[string]any{"command": "echo $GREETING", "env": map[string]any{"GREETING": "hi"}}); str(r, "stdout") != "hi\n" {
		t.Errorf("an ordinary variable: %v", r)
	}
}
