package fake

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// The fake's capacity is one node's CPUs, as a Kubernetes scheduler sees
// them: every container that has not ended holds its spec's CPUs (1 when
// the spec names none), warm ones included. With a capacity set, a job's
// Start waits for room, saying why (sandbox.WaitingForCapacity), and a
// warm sandbox that does not fit fails at once, as the Kubernetes runtime's
// do. Without one (the default) everything fits.

// defaultFakeCPUs is what a container holds when its spec names no CPUs.
const defaultFakeCPUs = 1_000_000_000

// errNoRoom is create's refusal when a container does not fit.
type errNoRoom struct {
	why   string
	freed <-chan struct{} // closed when a container ends or goes
}

func (e *errNoRoom) Error() string { return e.why }

// Is makes a warm sandbox's refusal sandbox.ErrNoRoom, as on Kubernetes.
func (e *errNoRoom) Is(target error) bool { return target == sandbox.ErrNoRoom }

// SetCapacity gives the engine a node of nanoCPUs (0: no limit). Set it
// before the engine's first use: its runtimes then declare Capacity.
func (e *Engine) SetCapacity(nanoCPUs int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.capacity = nanoCPUs
	if e.roomFreed == nil {
		e.roomFreed = make(chan struct{})
	}
}

// LargestSandbox is the node's CPUs: a job asking more never fits.
func (r *Runtime) LargestSandbox(context.Context) (int64, int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.capacity, 0, nil
}

// Room is the fake's one node.
func (r *Runtime) Room(context.Context) (sandbox.Room, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sandbox.Room{Nodes: 1, NanoCPUs: r.capacity}, nil
}

func cpusOf(spec sandbox.Spec) int64 {
	if spec.Limits.NanoCPUs > 0 {
		return spec.Limits.NanoCPUs
	}
	return defaultFakeCPUs
}

// fitsLocked refuses a container of spec when the node lacks its CPUs.
func (e *Engine) fitsLocked(spec sandbox.Spec) error {
	if e.capacity <= 0 {
		return nil
	}
	var used int64
	for _, c := range e.containers {
		if !c.hasEnded() {
			used += c.cpus
		}
	}
	if need := cpusOf(spec); used+need > e.capacity {
		return &errNoRoom{
			why:   fmt.Sprintf("0/1 nodes are available: 1 Insufficient cpu (it asks %s CPUs; %s of %s are held)", cpuText(need), cpuText(used), cpuText(e.capacity)),
			freed: e.roomFreed,
		}
	}
	return nil
}

// roomChanged wakes the starts waiting for room (a container ended or went).
func (e *Engine) roomChanged() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.roomFreed != nil {
		close(e.roomFreed)
		e.roomFreed = make(chan struct{})
	}
}

// createWhenRoom creates a job's container once the node has room for it,
// telling ctx's listeners why it waits meanwhile.
func (r *Runtime) createWhenRoom(ctx context.Context, spec sandbox.Spec) (*container, error) {
	waited := false
	for {
		c, err := r.create(spec)
		var full *errNoRoom
		if !errors.As(err, &full) {
			if waited && err == nil {
				sandbox.WaitingForCapacity(ctx, "")
			}
			return c, err
		}
		waited = true
		sandbox.WaitingForCapacity(ctx, full.why)
		select {
		case <-full.freed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for room: %s: %w", full.why, ctx.Err())
		}
	}
}

func cpuText(n int64) string { return fmt.Sprintf("%g", float64(n)/1e9) }
