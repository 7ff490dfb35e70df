package terminal

import (
	"strings"
	"testing"
	"time"
)

// A stream as top writes it (recorded shape: alternate screen, home, clear,
// styled header, absolute cursor moves, a line redrawn in place).
const topStream = "\x1b[?1049h\x1b[22;0;0t\x1b[1;24r\x1b(B\x1b[m\x1b[4l\x1b[?7h\x1b[H\x1b[2J" +
	"top - 12:00:01 up 1 min,  0 users,  load average: 0.00, 0.01, 0.00\x1b[K\r\n" +
	"Tasks:\x1b[m\x1b[1m   2 \x1b[m\x1b(Btotal,\x1b[m\x1b[1m   1 \x1b[mrunning\x1b[K\r\n" +
	"\x1b[4;1H\x1b[7m    PID USER      PR  NI\x1b[m\x1b[K" +
	"\x1b[5;1H      1 sandbox   20   0\x1b[K" +
	"\x1b[1;7H12:00:02\x1b[K"

func TestScreenRendersRecordedTopStream(t *testing.T) {
	s := Replay([]byte(topStream), 24, 80)
	if s.Rows != 24 || s.Cols != 80 || len(s.Lines) != 24 {
		t.Fatalf("size %dx%d with %d lines, want 24x80 with 24", s.Rows, s.Cols, len(s.Lines))
	}
	if !strings.HasPrefix(s.Lines[0], "top - 12:00:02") {
		t.Errorf("row 0 = %q, want the redrawn header", s.Lines[0])
	}
	// \x1b[K after the redraw cleared the rest of row 0.
	if s.Lines[0] != "top - 12:00:02" {
		t.Errorf("row 0 = %q: erase to end of line not applied", s.Lines[0])
	}
	if s.Lines[1] != "Tasks:   2 total,   1 running" {
		t.Errorf("row 1 = %q", s.Lines[1])
	}
	if s.Lines[2] != "" || s.Lines[3] != "    PID USER      PR  NI" || s.Lines[4] != "      1 sandbox   20   0" {
		t.Errorf("rows 2-4 = %q", s.Lines[2:5])
	}
	if !s.AltScreen {
		t.Error("alternate screen not reported")
	}
	if s.CursorRow != 0 || s.CursorCol != len("top - 12:00:02") {
		t.Errorf("cursor at %d,%d", s.CursorRow, s.CursorCol)
	}
	for _, l := range s.Lines {
		if strings.ContainsRune(l, 0x1b) {
			t.Fatalf("escape left in %q", l)
		}
	}
}

func TestScreenCarriageReturnBackspaceAndScroll(t *testing.T) {
	tm := New(3, 10)
	defer tm.Close()
	tm.Write([]byte("abcdef\rXY\r\n12\b\bZ\r\nline3\r\nline4"))
	s := tm.Screen()
	// Four lines on a three-row screen: the first scrolled off.
	want := []string{"Z2", "line3", "line4"}
	if strings.Join(s.Lines, "|") != strings.Join(want, "|") {
		t.Fatalf("lines %q, want %q", s.Lines, want)
	}
	if s.Text() != "Z2\nline3\nline4" {
		t.Errorf("text %q", s.Text())
	}
}

func TestScreenWrapsAndResizes(t *testing.T) {
	tm := New(4, 5)
	defer tm.Close()
	tm.Write([]byte("0123456789"))
	s := tm.Screen()
	if s.Lines[0] != "01234" || s.Lines[1] != "56789" {
		t.Fatalf("wrap: %q", s.Lines)
	}
	tm.Resize(6, 20)
	s = tm.Screen()
	if s.Rows != 6 || s.Cols != 20 || len(s.Lines) != 6 {
		t.Fatalf("after resize %dx%d, %d lines", s.Rows, s.Cols, len(s.Lines))
	}
	tm.Write([]byte("\x1b[6;1Hbottom"))
	if got := tm.Screen().Lines[5]; got != "bottom" {
		t.Errorf("row 5 after resize = %q", got)
	}
}

// Queries a program sends (cursor position, device attributes) are answered
// on the emulator's input side; nothing reads that here, so an answer must not
// block feeding output.
func TestScreenQueriesDoNotBlock(t *testing.T) {
	tm := New(24, 80)
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			tm.Write([]byte("\x1b[6n\x1b[c\x1b[>c\x1b[5n"))
		}
		tm.Write([]byte("ok"))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("writing queries blocked")
	}
	if tm.Screen().Lines[0] != "ok" {
		t.Errorf("row 0 = %q", tm.Screen().Lines[0])
	}
	tm.Close()
	tm.Write([]byte("\x1b[6nafter close")) // ignored, must not block or panic
	tm.Close()
}

func TestScreenWideCharacters(t *testing.T) {
	s := Replay([]byte("日本語 ok"), 2, 20)
	if s.Lines[0] != "日本語 ok" {
		t.Errorf("row 0 = %q", s.Lines[0])
	}
}

// A long output is fed once; the screen is its end.
func TestScreenLongOutput(t *testing.T) {
	tm := New(24, 80)
	defer tm.Close()
	line := strings.Repeat("x", 79) + "\r\n"
	start := time.Now()
	for i := 0; i < 20000; i++ { // 1.6 MB
		tm.Write([]byte(line))
	}
	tm.Write([]byte("end"))
	if got := tm.Screen().Lines[23]; got != "end" {
		t.Errorf("last row %q", got)
	}
	t.Logf("fed 1.6 MB in %s", time.Since(start))
}
