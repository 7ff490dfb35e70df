package output

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ToText turns captured bytes into a string that is safe to put in JSON.
// Valid UTF-8 is returned as is. Each invalid byte becomes U+FFFD and NUL
// bytes are removed; either sets lossy.
func ToText(b []byte) (s string, lossy bool) {
	if utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 {
		return string(b), false
	}
	var sb strings.Builder
	sb.Grow(len(b))
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			sb.WriteRune(utf8.RuneError)
			lossy = true
		case r == 0:
			lossy = true
		default:
			sb.Write(b[i : i+size])
		}
		i += size
	}
	return sb.String(), lossy
}

// HeadTail shortens b to about limit bytes by keeping its first and last
// halves around a marker line "\n... [N bytes omitted] ...\n", where N is the
// returned omitted count. The marker is extra: out may exceed limit by the
// marker's length. Cut points move (by at most 3 bytes) so no UTF-8 rune is
// split. If len(b) <= limit, b is returned unchanged with omitted 0.
func HeadTail(b []byte, limit int) (out []byte, omitted int64) {
	if len(b) <= limit {
		return b, 0
	}
	limit = max(limit, 0)
	head := limit / 2
	tail := len(b) - (limit - head)
	// Back the head cut up, and push the tail cut forward, to a rune start.
	for k := 0; k < utf8.UTFMax-1 && head > 0 && !utf8.RuneStart(b[head]); k++ {
		head--
	}
	for k := 0; k < utf8.UTFMax-1 && tail < len(b) && !utf8.RuneStart(b[tail]); k++ {
		tail++
	}
	omitted = int64(tail - head)
	marker := OmittedMarker(omitted)
	out = make([]byte, 0, head+len(marker)+len(b)-tail)
	out = append(out, b[:head]...)
	out = append(out, marker...)
	out = append(out, b[tail:]...)
	return out, omitted
}

const (
	lastLineMax    = 200      // bytes in LastLine's result
	lastLineWindow = 64 << 10 // LastLine only looks at this much of the end of b
)

// LastLine returns the last line of b that is not blank once escape
// sequences are stripped, as clean text for progress messages. A line longer
// than 200 bytes keeps its start and ends in "…" (200 bytes in all). Only the
// last 64 KiB of b are examined, so it stays cheap on huge output.
func LastLine(b []byte) string {
	if len(b) > lastLineWindow {
		b = b[len(b)-lastLineWindow:]
	}
	for len(b) > 0 {
		line := b
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			line, b = b[i+1:], b[:i]
		} else {
			b = nil
		}
		clean := bytes.TrimSpace(StripANSI(line))
		if len(clean) == 0 {
			continue
		}
		s, _ := ToText(clean)
		return truncateText(s, lastLineMax)
	}
	return ""
}

// truncateText cuts s to at most n bytes at a rune boundary, ending in "…".
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// OmittedMarker is the line that stands where n bytes of output were left out.
func OmittedMarker(n int64) string {
	return "\n... [" + strconv.FormatInt(n, 10) + " bytes omitted] ...\n"
}

// TrimRunes drops an incomplete UTF-8 sequence at the start and at the end of
// b, so that a slice cut out of a larger text does not split a rune.
func TrimRunes(b []byte) []byte {
	for i := 0; i < 3 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				b = b[:len(b)-i]
			}
			break
		}
	}
	return b
}
