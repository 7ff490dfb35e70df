package sandboxtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// runCapacity: the engine says how large one sandbox can be; a job's start
// that does not fit while another sandbox holds the room waits, telling its
// context why (sandbox.WaitingForCapacity), and is placed, told so, once
// that sandbox goes; a job asking more than the largest never gets to wait
// (the job manager refuses it; here the figure is only read). It fills the
// engine, so it runs alone.
func runCapacity(t *testing.T, e sandbox.Engine, image string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cpus, _, err := e.Capabilities().Capacity.LargestSandbox(ctx)
	if err != nil || cpus <= 0 {
		t.Fatalf("LargestSandbox: %d nanoCPUs, %v; want the largest sandbox's CPUs", cpus, err)
	}
	big := Spec(image, "sleep 300")
	big.Limits.NanoCPUs = cpus
	holder, err := e.Start(ctx, big, newBuffer())
	if err != nil {
		t.Fatalf("a sandbox of all %g CPUs: %v", float64(cpus)/1e9, err)
	}
	t.Cleanup(func() { _ = holder.Destroy(context.Background()) })

	var mu sync.Mutex
	var heard []string
	waits := make(chan string, 1)
	listen := sandbox.WithCapacityWait(ctx, func(why string) {
		mu.Lock()
		heard = append(heard, why)
		mu.Unlock()
		if why != "" {
			select {
			case waits <- why:
			default:
			}
		}
	})
	type started struct {
		h   sandbox.Handle
		err error
	}
	done := make(chan started, 1)
	small := Spec(image, "echo placed")
	small.Limits.NanoCPUs = min(cpus, 5e8)
	out := newBuffer()
	go func() {
		h, err := e.Start(listen, small, out)
		done <- started{h, err}
	}()
	select {
	case why := <-waits:
		if strings.TrimSpace(why) == "" {
			t.Fatal("told it waits for room without a reason")
		}
	case s := <-done:
		if s.h != nil {
			_ = s.h.Destroy(context.Background())
		}
		t.Fatalf("a sandbox was placed (%v) while another held all the room", s.err)
	case <-time.After(endWithin):
		t.Fatalf("the start was not told within %s that it waits for room", endWithin)
	}
	if err := holder.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	var s started
	select {
	case s = <-done:
	case <-ctx.Done():
		t.Fatal("not placed once the room was free")
	}
	if s.err != nil {
		t.Fatalf("the start that waited for room: %v", s.err)
	}
	t.Cleanup(func() { _ = s.h.Destroy(context.Background()) })
	if st := waitDone(t, s.h, "the placed sandbox"); st.ExitCode != 0 || !strings.Contains(out.Stdout(), "placed") {
		t.Fatalf("the placed sandbox: %+v, output %q", st, out.Stdout())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) < 2 || heard[len(heard)-1] != "" {
		t.Fatalf("the start heard %q; want its reason, then that it was placed", heard)
	}
}
