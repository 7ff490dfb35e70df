package secret

import (
	"bytes"
	"sync"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Redactor is a job's output on its way to be stored and returned: every
// secret value it knows is replaced by the job's placeholder for it, so a
// value a response reflected and the job printed is never kept. Values are
// matched on what a terminal prints (output.Printed): a value split by
// escape sequences (colour from grep --color or jq -C), by a \r or by other
// control characters is found whole, and what lay between its parts stays
// where it was. Every view of the output (raw, stripped, paged, a
// terminal's screen) reads what the Redactor passed on. A value split
// across writes is caught too: the end of a write that could begin a value,
// or that ends inside an escape sequence, is held back until the next write
// (or Flush) shows whether it does.
type Redactor struct {
	next sandbox.Output

	mu    sync.Mutex
	pairs []pair
	held  map[sandbox.Stream][]byte
}

// maxHeldBytes bounds what is held back per stream: a value's beginning
// followed by more escape sequences than this is passed on unmatched.
const maxHeldBytes = 64 << 10

type pair struct {
	value       []byte
	placeholder []byte
}

// NewRedactor redacts into next.
func NewRedactor(next sandbox.Output) *Redactor {
	return &Redactor{next: next, held: map[sandbox.Stream][]byte{}}
}

// Add makes value known: from now on it is written as placeholder.
func (r *Redactor) Add(value []byte, placeholder string) {
	if len(value) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pairs {
		if bytes.Equal(p.value, value) {
			return
		}
	}
	r.pairs = append(r.pairs, pair{append([]byte(nil), value...), []byte(placeholder)})
}

// Write redacts p and passes it on, holding back a tail that may begin a value.
func (r *Redactor) Write(stream sandbox.Stream, p []byte) {
	r.mu.Lock()
	buf := append(r.held[stream], p...)
	unfinished := output.Unfinished(buf) // an escape or a character the next write ends
	printed, at := output.Printed(buf[:unfinished])
	var out []byte
	i, k := 0, 0 // buf[:i] is passed on; printed[:k] is searched
	for {
		j, pr := r.earliest(printed[k:])
		if pr == nil {
			break
		}
		j += k
		last := j + len(pr.value) - 1
		out = append(out, buf[i:at[j]]...)
		out = append(out, pr.placeholder...)
		// What lay between the value's printed bytes (escapes, \r) stays.
		next := j
		for x := at[j]; x <= at[last]; x++ {
			if next <= last && at[next] == x {
				next++
				continue
			}
			out = append(out, buf[x])
		}
		i, k = at[last]+1, last+1
	}
	hold := unfinished
	if keep := r.partial(printed[k:]); keep > 0 {
		hold = min(hold, at[len(printed)-keep])
	}
	if len(buf)-hold > maxHeldBytes {
		hold = len(buf)
	}
	out = append(out, buf[i:hold]...)
	r.held[stream] = append([]byte(nil), buf[hold:]...)
	r.mu.Unlock()
	if len(out) > 0 {
		r.next.Write(stream, out)
	}
}

// Flush passes on what was held back: the output has ended, so it begins
// no value.
func (r *Redactor) Flush() {
	r.mu.Lock()
	held := r.held
	r.held = map[sandbox.Stream][]byte{}
	r.mu.Unlock()
	for _, s := range []sandbox.Stream{sandbox.Stdout, sandbox.Stderr} {
		if len(held[s]) > 0 {
			r.next.Write(s, held[s])
		}
	}
}

// earliest finds the first occurrence of any value in b (the longest when
// two start at the same place).
func (r *Redactor) earliest(b []byte) (int, *pair) {
	at, found := -1, (*pair)(nil)
	for k := range r.pairs {
		p := &r.pairs[k]
		j := bytes.Index(b, p.value)
		if j < 0 {
			continue
		}
		if at < 0 || j < at || (j == at && len(p.value) > len(found.value)) {
			at, found = j, p
		}
	}
	return at, found
}

// partial is the length of b's longest tail that is a proper beginning of a value.
func (r *Redactor) partial(b []byte) int {
	best := 0
	for _, p := range r.pairs {
		n := min(len(p.value)-1, len(b))
		for k := n; k > best; k-- {
			if bytes.Equal(b[len(b)-k:], p.value[:k]) {
				best = k
				break
			}
		}
	}
	return best
}
