package output

import "unicode/utf8"

const esc = 0x1b

// StripANSI removes terminal escape sequences and control characters so
// captured output reads as plain text:
//
//   - CSI (ESC [ … final, and 8-bit 0x9b), OSC/DCS/SOS/PM/APC strings
//     (ESC ] P X ^ _ … ended by BEL or ESC \; a newline also ends them so a
//     stray introducer cannot swallow the rest of the log), and other
//     ESC sequences (ESC [intermediates] final) are removed;
//   - C0 controls other than \n and \t, DEL, backspace and C1 control
//     characters are removed;
//   - \r\n becomes \n; a lone \r behaves like a terminal redrawing a line:
//     text printed after it replaces the line so far (progress bars keep only
//     their last state), while a \r at the end of a line or of the input
//     leaves the line as it was.
//
// Invalid UTF-8 is passed through untouched (see ToText). b is not modified.
func StripANSI(b []byte) []byte {
	out := make([]byte, 0, len(b))
	lineStart := 0     // index in out where the current line begins
	pendingCR := false // a \r was seen; the next printed text replaces the line

	emit := func(p []byte) {
		if pendingCR {
			out = out[:lineStart]
			pendingCR = false
		}
		out = append(out, p...)
	}

	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\n':
			out = append(out, '\n')
			lineStart = len(out)
			pendingCR = false
			i++
		case c == '\r':
			pendingCR = true
			i++
		case c == '\t':
			emit(b[i : i+1])
			i++
		case c == esc:
			i = skipEscape(b, i)
		case c < 0x20 || c == 0x7f:
			i++ // other C0 controls, backspace, DEL
		case c < utf8.RuneSelf:
			// Copy a run of printable ASCII at once.
			j := i + 1
			for j < len(b) && b[j] >= 0x20 && b[j] < 0x7f {
				j++
			}
			emit(b[i:j])
			i = j
		default:
			r, size := utf8.DecodeRune(b[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				if c == 0x9b { // 8-bit CSI; only when not part of a valid rune
					i = skipCSI(b, i+1)
				} else {
					emit(b[i : i+1])
					i++
				}
			case r == 0x9b: // CSI encoded as a UTF-8 C1 character
				i = skipCSI(b, i+size)
			case r >= 0x80 && r <= 0x9f: // other C1 controls
				i += size
			default:
				emit(b[i : i+size])
				i += size
			}
		}
	}
	return out
}

// skipEscape returns the index just past the escape sequence starting at b[i] == ESC.
func skipEscape(b []byte, i int) int {
	i++
	if i >= len(b) {
		return i
	}
	switch c := b[i]; {
	case c == '[':
		return skipCSI(b, i+1)
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return skipString(b, i+1)
	case c >= 0x20 && c <= 0x2f:
		// nF: intermediates then one final byte, e.g. ESC ( B.
		for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f {
			i++
		}
		if i < len(b) && b[i] >= 0x30 && b[i] <= 0x7e {
			i++
		}
		return i
	case c >= 0x30 && c <= 0x7e:
		return i + 1 // two-byte sequence, e.g. ESC 7, ESC M, ESC =
	default:
		return i // lone ESC before a control or non-ASCII byte: drop just the ESC
	}
}

// skipCSI returns the index past a CSI's parameters, intermediates and final
// byte, starting after the introducer. A byte that cannot belong to a CSI ends
// it without being consumed.
func skipCSI(b []byte, i int) int {
	for i < len(b) {
		c := b[i]
		switch {
		case c >= 0x40 && c <= 0x7e:
			return i + 1
		case c >= 0x20 && c <= 0x3f:
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index past a control string (OSC, DCS, …) ended by
// BEL or ESC \; a newline ends it too but is not consumed. (8-bit ST 0x9c is
// not honoured: in UTF-8 text it is a continuation byte.)
func skipString(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case 0x07:
			return i + 1
		case esc:
			if i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
			return i // another escape begins: end the string here
		case '\n':
			return i
		}
		i++
	}
	return i
}

// maxPendingEscape is how far back from the end of a page an unfinished
// escape sequence is looked for; a longer "sequence" is taken as text.
const maxPendingEscape = 4096

// PageEnd is where a page of output read from a larger stream should end so
// that it splits neither a UTF-8 character nor (with escapes) an escape
// sequence: the rest then begins the next page, whole. It returns len(b) when
// b ends cleanly, and never 0 for a non-empty b (a page always makes progress).
func PageEnd(b []byte, escapes bool) int {
	end := unfinished(b, escapes)
	if end == 0 {
		return len(b)
	}
	return end
}

// Unfinished is where an escape sequence or a UTF-8 character that b ends
// in the middle of begins (len(b) when b ends cleanly): what a filter of a
// stream holds back until the next write shows its end.
func Unfinished(b []byte) int { return unfinished(b, true) }

func unfinished(b []byte, escapes bool) int {
	end := len(b)
	// An incomplete (valid-prefix) UTF-8 sequence at the end.
	for i := 1; i <= 3 && i <= end; i++ {
		c := b[end-i]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[end-i : end]) {
				end -= i
			}
			break
		}
	}
	if escapes {
		lo := max(0, end-maxPendingEscape)
		for i := end - 1; i >= lo; i-- {
			if b[i] == esc {
				if !escapeComplete(b[:end], i) {
					end = i
				}
				break
			}
			if b[i] == '\n' {
				break // a newline ends any control string: nothing pending before it
			}
		}
	}
	return end
}

// Printed is b as StripANSI reads it, before it redraws lines: the bytes a
// terminal prints (text, \t and \n), with every escape sequence and control
// character (\r included) left out; at[k] is the index in b of printed[k].
// Secrets are matched on it (internal/secret), so a value split by colour
// codes, a title string or a \r is found whole.
func Printed(b []byte) (printed []byte, at []int) {
	printed, at = make([]byte, 0, len(b)), make([]int, 0, len(b))
	emit := func(i, j int) {
		for k := i; k < j; k++ {
			printed, at = append(printed, b[k]), append(at, k)
		}
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\n' || c == '\t':
			emit(i, i+1)
			i++
		case c == esc:
			i = skipEscape(b, i)
		case c < 0x20 || c == 0x7f:
			i++
		case c < utf8.RuneSelf:
			emit(i, i+1)
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				if c == 0x9b {
					i = skipCSI(b, i+1)
				} else {
					emit(i, i+1)
					i++
				}
			case r == 0x9b:
				i = skipCSI(b, i+size)
			case r >= 0x80 && r <= 0x9f:
				i += size
			default:
				emit(i, i+size)
				i += size
			}
		}
	}
	return printed, at
}

// escapeComplete says whether the escape sequence starting at b[i] == ESC is
// finished within b.
func escapeComplete(b []byte, i int) bool {
	if i+1 >= len(b) {
		return false
	}
	switch c := b[i+1]; {
	case c == '[':
		j := skipCSI(b, i+2)
		return j < len(b) || (j > i+2 && b[j-1] >= 0x40 && b[j-1] <= 0x7e)
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		j := skipString(b, i+2)
		return j < len(b) || b[j-1] == 0x07 || (j >= 2 && b[j-2] == esc && b[j-1] == '\\')
	case c >= 0x20 && c <= 0x2f:
		j := i + 1
		for j < len(b) && b[j] >= 0x20 && b[j] <= 0x2f {
			j++
		}
		return j < len(b)
	default:
		return true
	}
}
