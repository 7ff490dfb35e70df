package job

import (
	"fmt"
	"sort"
	"strings"
)

// slots shares jobs.max_concurrent among tenants (docs/http.md, "Fair
// shares"). Each tenant known to the server (a token that may run jobs) is
// guaranteed its share: max × its weight / all weights, rounded down. Slots
// nobody is guaranteed, and a tenant's own share, are taken first come; a
// tenant past its share may borrow only slots that leave every other
// tenant's unused share free, so another tenant's job always starts within
// its share however many jobs (idle sessions, long builds) one tenant
// holds. Without shares (stdio, no token file) it is one pool. Not safe for
// concurrent use: the manager holds its lock.
type slots struct {
	max     int
	shares  map[string]int // guaranteed slots by tenant; nil: one pool
	running int
	held    map[string]int // slots held, by tenant
}

func newSlots(max int, weights map[string]int) *slots {
	return &slots{max: max, shares: Shares(max, weights), held: map[string]int{}}
}

// Shares divides max slots among tenants by weight (each at least 1 when
// that fits), rounding down; nil weights give nil (one pool).
func Shares(max int, weights map[string]int) map[string]int {
	if len(weights) == 0 {
		return nil
	}
	total := 0
	for _, w := range weights {
		total += max0(w)
	}
	out := make(map[string]int, len(weights))
	if total == 0 {
		return out
	}
	for t, w := range weights {
		out[t] = max * max0(w) / total
	}
	return out
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// reservedFor is how many free slots other tenants' unused shares hold
// back from tenant t.
func (s *slots) reservedFor(t string) int {
	n := 0
	for o, share := range s.shares {
		if o != t && share > s.held[o] {
			n += share - s.held[o]
		}
	}
	return n
}

// canTake says whether a job of tenant t may start now.
func (s *slots) canTake(t string) bool {
	if s.running >= s.max {
		return false
	}
	return s.held[t] < s.shares[t] || s.running+s.reservedFor(t) < s.max
}

func (s *slots) take(t string) {
	s.running++
	s.held[t]++
}

func (s *slots) give(t string) {
	s.running--
	if s.held[t]--; s.held[t] <= 0 {
		delete(s.held, t)
	}
}

// next picks the queued job to start now, if any: first the oldest of a
// tenant within its share, then the oldest that may borrow.
func (s *slots) next(queue []*liveJob) int {
	for i, j := range queue {
		if t := j.owner.Name; s.held[t] < s.shares[t] && s.running < s.max {
			return i
		}
	}
	for i, j := range queue {
		if s.canTake(j.owner.Name) {
			return i
		}
	}
	return -1
}

// why says why a job of tenant t waits, as a sentence.
func (s *slots) why(t string) string {
	if s.shares == nil {
		return fmt.Sprintf("all %d job slots are taken (policy jobs.max_concurrent); it starts when one frees", s.max)
	}
	share := s.shares[t]
	if s.held[t] >= share {
		return fmt.Sprintf("this tenant holds %d job slots, its share is %d of %d (policy jobs.max_concurrent, split by the token file's weights), and the rest are taken or held for other tenants' shares; it starts when one of this tenant's jobs ends or a slot frees",
			s.held[t], share, s.max)
	}
	return fmt.Sprintf("all %d job slots are taken; it starts within this tenant's share of %d as soon as one frees", s.max, share)
}

// String lists the slots held, for logs.
func (s *slots) String() string {
	var parts []string
	for t, n := range s.held {
		parts = append(parts, fmt.Sprintf("%s=%d/%d", t, n, s.shares[t]))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d/%d [%s]", s.running, s.max, strings.Join(parts, " "))
}
