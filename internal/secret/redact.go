package secret

import (
	"bytes"
	"sync"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Redactor is a job's output on its way to be stored and returned: every
// secret value it knows is replaced by the job's placeholder for it, so a
// value a response reflected and the job printed is never kept. A value
// split across writes is caught too: the end of a write that could begin a
// value is held back until the next write (or Flush) shows whether it does.
type Redactor struct {
	next sandbox.Output

	mu    sync.Mutex
	pairs []pair
	held  map[sandbox.Stream][]byte
}

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
	var out []byte
	i := 0
	for {
		j, pr := r.earliest(buf[i:])
		if pr == nil {
			break
		}
		out = append(out, buf[i:i+j]...)
		out = append(out, pr.placeholder...)
		i += j + len(pr.value)
	}
	rest := buf[i:]
	keep := r.partial(rest)
	out = append(out, rest[:len(rest)-keep]...)
	r.held[stream] = append([]byte(nil), rest[len(rest)-keep:]...)
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
