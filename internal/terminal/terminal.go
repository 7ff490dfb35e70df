// Package terminal keeps what a PTY session's screen shows: a terminal
// emulator (github.com/charmbracelet/x/vt) fed with the session's output as it
// arrives, so the screen is always current and no call replays the output.
//
// The emulator answers some queries a program sends (device attributes,
// cursor position reports) on its input side; those answers are drained and
// dropped here, so a query can never block the session's output.
package terminal

import (
	"io"
	"strings"
	"sync"

	"github.com/charmbracelet/x/vt"
)

// Limits of a terminal's size.
const (
	MinRows, MaxRows = 1, 500
	MinCols, MaxCols = 1, 1000
)

// Screen is what a terminal shows.
type Screen struct {
	Rows, Cols int
	// Lines are the screen's rows, top to bottom, each with its trailing
	// blanks removed (always Rows of them).
	Lines []string
	// CursorRow and CursorCol are the cursor's position, from 0.
	CursorRow, CursorCol int
	// AltScreen: a full-screen program (top, vim, less) has switched to the
	// alternate screen.
	AltScreen bool
}

// Text is the screen as text: its lines joined by newlines, trailing blank
// lines left out.
func (s Screen) Text() string {
	n := len(s.Lines)
	for n > 0 && s.Lines[n-1] == "" {
		n--
	}
	return strings.Join(s.Lines[:n], "\n")
}

// Terminal is an emulated terminal. It is safe for concurrent use.
type Terminal struct {
	mu     sync.Mutex
	emu    *vt.Emulator
	closed bool
}

// New returns a terminal of rows × cols (clamped to the limits).
func New(rows, cols int) *Terminal {
	rows, cols = clamp(rows, MinRows, MaxRows), clamp(cols, MinCols, MaxCols)
	e := vt.NewEmulator(cols, rows)
	// Scrolled-off lines are not kept: the screen is what is asked for, and
	// the whole output stays readable by cursor.
	e.SetScrollbackSize(1)
	go func() { _, _ = io.Copy(io.Discard, e) }() // answers to queries; ends at Close
	return &Terminal{emu: e}
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}

// Write feeds output the program wrote to the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		_, _ = t.emu.Write(p)
	}
	return len(p), nil
}

// Resize changes the terminal's size, as the program's terminal was resized.
func (t *Terminal) Resize(rows, cols int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.emu.Resize(clamp(cols, MinCols, MaxCols), clamp(rows, MinRows, MaxRows))
	}
}

// Screen returns what the terminal shows now.
func (t *Terminal) Screen() Screen {
	t.mu.Lock()
	defer t.mu.Unlock()
	rows, cols := t.emu.Height(), t.emu.Width()
	lines := strings.Split(t.emu.String(), "\n")
	out := make([]string, rows)
	for i := range out {
		if i < len(lines) {
			out[i] = strings.TrimRight(lines[i], " \r")
		}
	}
	pos := t.emu.CursorPosition()
	return Screen{Rows: rows, Cols: cols, Lines: out, CursorRow: pos.Y, CursorCol: pos.X, AltScreen: t.emu.IsAltScreen()}
}

// Close releases the terminal; later writes are ignored, Screen still works.
func (t *Terminal) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	// Closing the emulator's input side ends the goroutine draining it.
	// (Emulator.Close would also set a flag that goroutine reads unlocked.)
	if pw, ok := t.emu.InputPipe().(*io.PipeWriter); ok {
		_ = pw.CloseWithError(io.EOF)
	}
}

// Replay returns the screen after data was written to a fresh terminal of
// rows × cols: the screen of a session that has ended.
func Replay(data []byte, rows, cols int) Screen {
	t := New(rows, cols)
	defer t.Close()
	_, _ = t.Write(data)
	return t.Screen()
}
