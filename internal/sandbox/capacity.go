package sandbox

import (
	"context"
	"errors"
)

// A sandbox the engine cannot place yet for want of room (a Kubernetes pod
// no node has the CPU or memory for, a namespace's quota used up) waits
// for it, and its start says so through the start's context: the job shows
// as queued with the engine's reason, and the warm pool gives back its idle
// sandboxes, so that an idle warm sandbox is never why a job cannot start.

type capacityKey struct{}

// ErrNoRoom is a warm sandbox's start refused for want of room: the pool
// tries it again soon, without the backoff of an engine failing.
var ErrNoRoom = errors.New("no room for a warm sandbox")

// CapacityFunc hears a start's wait for room: why is the engine's reason,
// in a sentence, while the start waits; "" once the sandbox is placed.
type CapacityFunc func(why string)

// WithCapacityWait returns a context whose starts tell f of their waits for
// room, and then whoever ctx told before (the pool, then the job).
func WithCapacityWait(ctx context.Context, f CapacityFunc) context.Context {
	prev, _ := ctx.Value(capacityKey{}).(CapacityFunc)
	if prev == nil {
		return context.WithValue(ctx, capacityKey{}, f)
	}
	return context.WithValue(ctx, capacityKey{}, CapacityFunc(func(why string) {
		f(why)
		prev(why)
	}))
}

// WaitingForCapacity is what a runtime's Start calls while the engine has
// no room for the sandbox (why, a sentence with the engine's reason), and
// with "" once it is placed. It says whether anyone heard: a start nobody
// waits on keeps its own deadline.
func WaitingForCapacity(ctx context.Context, why string) bool {
	f, ok := ctx.Value(capacityKey{}).(CapacityFunc)
	if ok {
		f(why)
	}
	return ok
}

// CapacityReporter says how much room the engine has for sandboxes: how
// large one can ever be (the largest node's allocatable CPU and memory,
// within the namespace's quota; a job asking more waits forever, so it is
// refused at once) and the room in all (doctor sizes the pool with it).
type CapacityReporter interface {
	// LargestSandbox is the most CPU (in billionths of a CPU) and memory
	// (bytes) one sandbox can be given; 0 where the engine does not say.
	LargestSandbox(ctx context.Context) (nanoCPUs, memoryBytes int64, err error)
	// Room is what the engine holds in all, as far as the server may read it.
	Room(ctx context.Context) (Room, error)
}

// Room is an engine's room for sandboxes; a 0 is unknown (or no quota).
type Room struct {
	Nodes                      int
	NanoCPUs, MemoryBytes      int64 // allocatable, summed over the nodes
	QuotaNanoCPUs, QuotaMemory int64 // the namespace's quota
	QuotaPods                  int64
}
