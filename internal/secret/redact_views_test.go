package secret

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/terminal"
)

// splitters are what a program prints between a value's parts by design
// or by accident: colours (grep --color, jq -C), bold, a title and a
// hyperlink string, cursor moves that keep the order, \r, shift and NUL.
var splitters = []string{
	"\x1b[1m", "\x1b[0m", "\x1b[01;31m\x1b[K", "\x1b[38;5;196m", "\x1b[m", "\x1b(B",
	"\x1b]0;title\a", "\x1b]8;;https://x.example/\x1b\\", "\x1b[?25l", "\x1b7", "\x1b8",
	"\r", "\x0f", "\x00", "\x7f", "\u0085",
}

// writeRandomly feeds b to r in random pieces and flushes it.
func writeRandomly(rng *rand.Rand, r *Redactor, b []byte) {
	for len(b) > 0 {
		n := 1 + rng.IntN(min(len(b), 1+rng.IntN(24)))
		r.Write(sandbox.Stdout, b[:n])
		b = b[n:]
	}
	r.Flush()
}

// randomText is filler from an alphabet a value never uses.
func randomText(rng *rand.Rand, n int) string {
	const alphabet = "abcdefghij klmnop.,;"
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

// A property: a value printed split at random places by random escapes
// and controls, written in random pieces, is held whole by no view of the
// output: the raw bytes, StripANSI's text, pages read by cursor (each
// stripped, as read_output does), and a terminal's screen (rows joined, so
// a value the terminal wrapped is caught too). What is not the value is
// passed on as it was.
func TestRedactionHoldsOnEveryView(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 2))
	const valueAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	for trial := range 500 {
		value := make([]byte, 8+rng.IntN(40))
		for i := range value {
			value[i] = valueAlphabet[rng.IntN(len(valueAlphabet))]
		}
		var in bytes.Buffer
		in.WriteString(randomText(rng, rng.IntN(60)))
		cuts := map[int]bool{}
		for range rng.IntN(5) {
			cuts[1+rng.IntN(len(value)-1)] = true
		}
		for i, c := range value {
			if cuts[i] {
				for range 1 + rng.IntN(3) {
					in.WriteString(splitters[rng.IntN(len(splitters))])
				}
			}
			in.WriteByte(c)
		}
		in.WriteString(randomText(rng, rng.IntN(60)))
		if rng.IntN(2) == 0 {
			in.WriteString("\n")
		}

		s := sink{}
		r := NewRedactor(s)
		r.Add(value, "sbx_placeholder_P")
		writeRandomly(rng, r, in.Bytes())
		raw := []byte(s[sandbox.Stdout].String())

		views := map[string][]byte{"raw": raw, "stripped": output.StripANSI(raw)}
		printed, _ := output.Printed(raw)
		views["printed"] = printed
		var pages [][]byte
		for rest := raw; len(rest) > 0; {
			n := output.PageEnd(rest[:min(len(rest), 1+rng.IntN(32))], true)
			pages = append(pages, output.StripANSI(rest[:n]))
			rest = rest[n:]
		}
		views["pages"] = bytes.Join(pages, nil)
		for _, cols := range []int{7, 80} {
			views["screen"] = append(views["screen"], strings.ReplaceAll(terminal.Replay(raw, 24, cols).Text(), "\n", "")...)
			views["screen"] = append(views["screen"], '|')
		}
		for name, v := range views {
			if bytes.Contains(v, value) {
				t.Fatalf("trial %d: the %s view holds the value %q:\ninput %q\nraw   %q", trial, name, value, in.Bytes(), raw)
			}
		}
		for _, p := range pages {
			if bytes.Contains(p, value) {
				t.Fatalf("trial %d: a page holds the value: %q", trial, p)
			}
		}
		// Nothing else changed: what a terminal prints is the input's, with
		// the value as its placeholder.
		want, _ := output.Printed(in.Bytes())
		if want = bytes.Replace(want, value, []byte("sbx_placeholder_P"), 1); !bytes.Equal(printed, want) {
			t.Fatalf("trial %d: printed text changed:\ngot  %q\nwant %q", trial, printed, want)
		}
	}
}

// The review's reproduction, as a program prints it:
// printf '\033[1m%s\033[0m%s\n' "${v:0:4}" "${v:4}".
func TestRedactionThroughBoldSplit(t *testing.T) {
	s := sink{}
	r := NewRedactor(s)
	r.Add([]byte("tok-0123456789"), "PH")
	r.Write(sandbox.Stdout, []byte("\x1b[1mtok-\x1b[0m0123456789\n"))
	r.Flush()
	if got := s[sandbox.Stdout].String(); got != "\x1b[1mPH\x1b[0m\n" {
		t.Fatalf("got %q", got)
	}
}
