package observe

import (
	"context"
	"testing"
	"time"
)

// TestTimelineInTimeOrder: marks print in time order as milliseconds since
// the start, after the notes; a context without a timeline marks nothing.
func TestTimelineInTimeOrder(t *testing.T) {
	start := time.Unix(100, 0)
	tl := NewTimeline(start)
	tl.Note("tool", "run_command")
	tl.MarkAt("b", start.Add(2500*time.Microsecond))
	tl.MarkAt("a", start.Add(1250*time.Microsecond))
	tl.MarkAt("never", time.Time{}) // no stamp: no mark
	ctx := WithTimeline(context.Background(), tl)
	if TimelineOf(ctx) != tl {
		t.Fatal("the context does not carry the timeline")
	}
	if got, want := tl.String(), "tool=run_command a=1.250 b=2.500"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	MarkCtx(context.Background(), "nowhere") // no timeline: nothing happens
	var none *Timeline
	none.Mark("x")
	if none.String() != "" {
		t.Error("a nil timeline prints something")
	}
}
