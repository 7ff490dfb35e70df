package observe

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Timeline is where one tool call's time goes: named marks from its arrival
// to its answer, made by each layer it passes (the wire, the job manager,
// the pool, the supervisor's own stamps). It travels in the call's context;
// with none there, marking does nothing. Logged at debug level ("call
// timeline"), it is what `bench -trace` reads (docs/benchmark.md).
type Timeline struct {
	mu    sync.Mutex
	start time.Time
	marks []Mark
	notes []string // "key=value", in the order noted
}

// Mark is one named instant of a Timeline.
type Mark struct {
	Name string
	At   time.Time
}

// NewTimeline starts a timeline at start (the call's arrival).
func NewTimeline(start time.Time) *Timeline { return &Timeline{start: start} }

// Mark records name now.
func (t *Timeline) Mark(name string) {
	if t != nil { // no clock read for a call nobody traces
		t.MarkAt(name, time.Now())
	}
}

// MarkAt records name at at (a stamp another process made, on the same clock).
func (t *Timeline) MarkAt(name string, at time.Time) {
	if t == nil || at.IsZero() {
		return
	}
	t.mu.Lock()
	t.marks = append(t.marks, Mark{name, at})
	t.mu.Unlock()
}

// Note adds key=value to what String prints before the marks (the tool,
// the job).
func (t *Timeline) Note(key, value string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.notes = append(t.notes, key+"="+value)
	t.mu.Unlock()
}

// Start is when the call arrived.
func (t *Timeline) Start() time.Time { return t.start }

// Marks are the marks in time order.
func (t *Timeline) Marks() []Mark {
	t.mu.Lock()
	marks := slices.Clone(t.marks)
	t.mu.Unlock()
	slices.SortStableFunc(marks, func(a, b Mark) int { return a.At.Compare(b.At) })
	return marks
}

// Notes are the notes by key (a key noted twice keeps its last value).
func (t *Timeline) Notes() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.notes))
	for _, n := range t.notes {
		k, v, _ := strings.Cut(n, "=")
		out[k] = v
	}
	return out
}

// String is the notes, then the marks in time order, each as milliseconds since the start:
// "handler=0.051 recorded=0.412 …".
func (t *Timeline) String() string {
	if t == nil {
		return ""
	}
	marks := t.Marks()
	t.mu.Lock()
	notes := slices.Clone(t.notes)
	t.mu.Unlock()
	var b strings.Builder
	b.WriteString(strings.Join(notes, " "))
	for _, m := range marks {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.Name)
		b.WriteByte('=')
		b.WriteString(strconv.FormatFloat(float64(m.At.Sub(t.start).Microseconds())/1000, 'f', 3, 64))
	}
	return b.String()
}

type timelineKey struct{}

// WithTimeline is ctx carrying t.
func WithTimeline(ctx context.Context, t *Timeline) context.Context {
	return context.WithValue(ctx, timelineKey{}, t)
}

// TimelineOf is ctx's timeline, or nil.
func TimelineOf(ctx context.Context) *Timeline {
	t, _ := ctx.Value(timelineKey{}).(*Timeline)
	return t
}

// MarkCtx marks name on ctx's timeline, if it has one.
func MarkCtx(ctx context.Context, name string) { TimelineOf(ctx).Mark(name) }
