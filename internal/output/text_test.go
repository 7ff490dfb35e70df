package output

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStripANSI(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello\tworld\n", "hello\tworld\n"},
		{"colors", "\x1b[1;31mred\x1b[0m and \x1b[38;5;208morange\x1b[m\n", "red and orange\n"},
		{"cursor movement", "a\x1b[2Ab\x1b[10;20Hc\x1b[K\x1b[?25l", "abc"},
		{"OSC title BEL", "\x1b]0;my title\x07text", "text"},
		{"OSC hyperlink ST", "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"unterminated OSC stops at newline", "\x1b]0;oops\nnext", "\nnext"},
		{"two-byte and charset escapes", "\x1b7a\x1b8\x1b(Bb\x1b=c\x1bM", "abc"},
		{"8-bit CSI", "x\x9b31my", "xy"},
		{"UTF-8 C1 CSI", "x\u009b1my", "xy"},
		{"continuation byte 0x9b is not CSI", "ě\x1b[0m", "ě"},
		{"CRLF", "one\r\ntwo\r\n", "one\ntwo\n"},
		{"progress bar", "10%\r50%\r100%\ndone\n", "100%\ndone\n"},
		{"progress with erase line", "\r\x1b[Kfetch 1/3\r\x1b[Kfetch 3/3\n", "fetch 3/3\n"},
		{"trailing CR keeps line", "50%\r100%\r", "100%"},
		{"CR only affects current line", "keep\nold\rnew\n", "keep\nnew\n"},
		{"control chars", "a\x00b\x07c\x08d\x7fe\x1bf", "abcde"},
		{"lone ESC at end", "abc\x1b", "abc"},
		{"invalid UTF-8 passes through", "a\xffb", "a\xffb"},
		{"unicode kept", "日本語 ✓\n", "日本語 ✓\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(StripANSI([]byte(tc.in))); got != tc.want {
				t.Errorf("StripANSI(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestToText(t *testing.T) {
	tests := []struct {
		name, in, want string
		lossy          bool
	}{
		{"valid", "héllo ✓", "héllo ✓", false},
		{"replacement char itself is valid", "a\uFFFDb", "a\uFFFDb", false},
		{"invalid byte", "a\xffb", "a\uFFFDb", true},
		{"truncated rune", "ok\xe6\x97", "ok\uFFFD\uFFFD", true},
		{"NUL removed", "a\x00b\x00", "ab", true},
		{"empty", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, lossy := ToText([]byte(tc.in))
			if got != tc.want || lossy != tc.lossy {
				t.Errorf("ToText(%q) = %q, %v; want %q, %v", tc.in, got, lossy, tc.want, tc.lossy)
			}
			if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
				t.Errorf("result %q not JSON-safe", got)
			}
		})
	}
}

func TestHeadTail(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		limit       int
		wantHead    string
		wantTail    string
		wantOmitted int64
	}{
		{"short unchanged", "abc", 3, "abc", "", 0},
		{"ascii", "0123456789", 4, "01", "89", 6},
		{"odd limit", "0123456789", 5, "01", "789", 5},
		// "é" is 2 bytes: head 5 backs up to 4, tail start 20-6=14 is a rune start.
		{"two-byte runes", strings.Repeat("é", 10), 11, "éé", "ééé", 10},
		// "日" is 3 bytes: head 4 backs up to 3, tail start 30-4=26 moves to 27.
		{"three-byte runes", strings.Repeat("日", 10), 8, "日", "日", 24},
		{"zero limit", "abc", 0, "", "", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, omitted := HeadTail([]byte(tc.in), tc.limit)
			want := tc.wantHead
			if tc.wantOmitted > 0 {
				want += "\n... [" + strconv.FormatInt(tc.wantOmitted, 10) + " bytes omitted] ...\n" + tc.wantTail
			}
			if string(out) != want || omitted != tc.wantOmitted {
				t.Errorf("HeadTail(%q, %d) = %q, %d; want %q, %d", tc.in, tc.limit, out, omitted, want, tc.wantOmitted)
			}
			if !utf8.Valid(out) {
				t.Errorf("split a rune: %q", out)
			}
		})
	}
}

func TestLastLine(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	tests := []struct {
		name, in, want string
	}{
		{"simple", "a\nb\nlast\n", "last"},
		{"no trailing newline", "a\nlast", "last"},
		{"skips blank and escape-only lines", "real\n  \n\x1b[0m\n\n", "real"},
		{"progress resolved", "Downloading 10%\rDownloading 90%\r\n", "Downloading 90%"},
		{"colors stripped", "\x1b[32mok\x1b[0m\n", "ok"},
		{"empty", "", ""},
		{"only blanks", "\n\n \n", ""},
		{"long line truncated", long + "\n", strings.Repeat("é", 98) + "…"},
		{"invalid UTF-8", "bad \xff\n", "bad \uFFFD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LastLine([]byte(tc.in))
			if got != tc.want {
				t.Errorf("LastLine(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if len(got) > 200 {
				t.Errorf("result is %d bytes", len(got))
			}
		})
	}
}

func TestPageEnd(t *testing.T) {
	e := "é" // 2 bytes
	cases := []struct {
		name    string
		in      string
		escapes bool
		want    int
	}{
		{"clean ascii", "abc", false, 3},
		{"whole rune", "a" + e, false, 3},
		{"half rune", "a" + e[:1], false, 1},
		{"three of four", "a" + "😀"[:3], false, 1},
		{"only a half rune makes progress", e[:1], false, 1},
		{"invalid byte is not held back", "a\xff", false, 2},
		{"complete csi", "a\x1b[31mb", true, 7},
		{"csi without final", "a\x1b[31", true, 1},
		{"lone esc", "ab\x1b", true, 2},
		{"csi ends the page", "a\x1b[0m", true, 5},
		{"osc unterminated", "a\x1b]0;title", true, 1},
		{"osc terminated by bel", "a\x1b]0;t\x07", true, 7},
		{"osc terminated by st", "a\x1b]0;t\x1b\\", true, 8},
		{"escapes off keeps it", "a\x1b[31", false, 5},
		{"newline after esc", "a\x1b]0;t\nb", true, 8},
	}
	for _, c := range cases {
		if got := PageEnd([]byte(c.in), c.escapes); got != c.want {
			t.Errorf("%s: PageEnd(%q) = %d, want %d", c.name, c.in, got, c.want)
		}
	}
}

// Paging any text with PageEnd loses and breaks nothing: joined pages equal
// the input, and each page is valid UTF-8 without a partial escape.
func TestPagingIsLossless(t *testing.T) {
	in := []byte(strings.Repeat("é", 5000) + "\x1b[1;31mred\x1b[0m" + strings.Repeat("日本", 100))
	for _, size := range []int{1, 2, 3, 5, 333, 4096} {
		var joined []byte
		for pos := 0; pos < len(in); {
			page := in[pos:min(pos+size, len(in))]
			n := PageEnd(page, true)
			if size >= 4 && !utf8.Valid(page[:n]) {
				t.Fatalf("size %d: page at %d is not valid UTF-8", size, pos)
			}
			joined = append(joined, page[:n]...)
			pos += n
		}
		if string(joined) != string(in) {
			t.Fatalf("size %d: joined pages differ", size)
		}
	}
}
