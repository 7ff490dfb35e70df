package console

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Segment is a run of output text in one style. Text is plain text: it is
// only ever put into a page escaped (html/template, or textContent in the
// page's script), so output can never become markup.
type Segment struct {
	Text  string `json:"t"`
	Class string `json:"c,omitempty"`
}

// maxPending bounds an escape sequence kept across chunks: a longer one is
// not a sequence anyone draws with, and is dropped.
const maxPending = 256

// ansi turns a stream of terminal output into styled segments. It keeps the
// style and any sequence cut by a chunk boundary between calls to feed.
type ansi struct {
	fg, bg                           int // -1: default; 0-15 the palette
	bold, dim, italic, underline, in bool
	pending                          []byte
}

func newANSI() *ansi { return &ansi{fg: -1, bg: -1} }

// feed converts the next chunk of output. Colours (SGR) become classes;
// other escape sequences (cursor moves, titles) and control characters
// other than newline and tab are dropped; carriage returns are dropped.
func (a *ansi) feed(chunk []byte) []Segment {
	b := append(a.pending, chunk...)
	a.pending = nil
	var (
		out  []Segment
		text strings.Builder
	)
	flush := func() {
		if text.Len() == 0 {
			return
		}
		s := text.String()
		text.Reset()
		c := a.class()
		if n := len(out); n > 0 && out[n-1].Class == c {
			out[n-1].Text += s
			return
		}
		out = append(out, Segment{Text: s, Class: c})
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == 0x1b:
			n, params, final, complete := escape(b[i:])
			if !complete {
				if len(b)-i <= maxPending {
					a.pending = append([]byte(nil), b[i:]...)
				}
				flush()
				return out
			}
			if final == 'm' {
				flush()
				a.sgr(params)
			}
			i += n
		case c == '\n' || c == '\t':
			text.WriteByte(c)
			i++
		case c < 0x20 || c == 0x7f:
			i++
		case c < utf8.RuneSelf:
			text.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				if !utf8.FullRune(b[i:]) {
					a.pending = append([]byte(nil), b[i:]...)
					flush()
					return out
				}
				text.WriteRune(utf8.RuneError)
				i++
				continue
			}
			text.Write(b[i : i+size])
			i += size
		}
	}
	flush()
	return out
}

// escape measures the escape sequence at the start of b: its length, a CSI
// sequence's parameters and final byte, and whether it is complete.
func escape(b []byte) (n int, params string, final byte, complete bool) {
	if len(b) < 2 {
		return 0, "", 0, false
	}
	switch b[1] {
	case '[': // CSI: parameters and intermediates, then a final byte 0x40-0x7e
		for i := 2; i < len(b); i++ {
			if b[i] >= 0x40 && b[i] <= 0x7e {
				return i + 1, string(b[2:i]), b[i], true
			}
		}
		return 0, "", 0, false
	case ']', 'P', '_', '^': // OSC, DCS, APC, PM: up to BEL or ST (ESC \)
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1, "", 0, true
			}
			if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
				return i + 2, "", 0, true
			}
		}
		return 0, "", 0, false
	case '(', ')', '*', '+', '#', '%': // charset designations take one more byte
		if len(b) < 3 {
			return 0, "", 0, false
		}
		return 3, "", 0, true
	}
	return 2, "", 0, true
}

// sgr applies Select Graphic Rendition parameters.
func (a *ansi) sgr(params string) {
	if params == "" {
		params = "0"
	}
	ps := strings.FieldsFunc(params, func(r rune) bool { return r == ';' || r == ':' })
	for i := 0; i < len(ps); i++ {
		p, err := strconv.Atoi(ps[i])
		if err != nil {
			continue
		}
		switch {
		case p == 0:
			*a = ansi{fg: -1, bg: -1}
		case p == 1:
			a.bold = true
		case p == 2:
			a.dim = true
		case p == 3:
			a.italic = true
		case p == 4:
			a.underline = true
		case p == 7:
			a.in = true
		case p == 22:
			a.bold, a.dim = false, false
		case p == 23:
			a.italic = false
		case p == 24:
			a.underline = false
		case p == 27:
			a.in = false
		case p >= 30 && p <= 37:
			a.fg = p - 30
		case p == 39:
			a.fg = -1
		case p >= 40 && p <= 47:
			a.bg = p - 40
		case p == 49:
			a.bg = -1
		case p >= 90 && p <= 97:
			a.fg = p - 90 + 8
		case p >= 100 && p <= 107:
			a.bg = p - 100 + 8
		case p == 38 || p == 48:
			// 38;5;N picks from 256 colours (the first 16 are the palette; the
			// rest are drawn in the default colour); 38;2;R;G;B is skipped.
			colour := -1
			if i+2 < len(ps) && ps[i+1] == "5" {
				if n, err := strconv.Atoi(ps[i+2]); err == nil && n < 16 {
					colour = n
				}
				i += 2
			} else if i+4 < len(ps) && ps[i+1] == "2" {
				i += 4
			}
			if p == 38 {
				a.fg = colour
			} else {
				a.bg = colour
			}
		}
	}
}

// class is the CSS classes of the current style.
func (a *ansi) class() string {
	var c []string
	fg, bg := a.fg, a.bg
	if a.in {
		fg, bg = bg, fg
		c = append(c, "inv")
	}
	if fg >= 0 {
		c = append(c, "f"+strconv.Itoa(fg))
	}
	if bg >= 0 {
		c = append(c, "b"+strconv.Itoa(bg))
	}
	if a.bold {
		c = append(c, "bold")
	}
	if a.dim {
		c = append(c, "dim")
	}
	if a.italic {
		c = append(c, "it")
	}
	if a.underline {
		c = append(c, "ul")
	}
	return strings.Join(c, " ")
}
