package fake

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// A fake sandbox has one process, its script, as pid 1 (its
// sandbox.ProcessInspector): enough for the processes contract, which
// lists a running sandbox's processes and signals one by its pid.

func (r *Runtime) Processes(ctx context.Context, containerID string) ([]sandbox.Process, error) {
	c, down := r.lookup(containerID)
	if down {
		return nil, engineDown()
	}
	if c == nil || !c.isRunning() {
		return nil, fmt.Errorf("%w: %s is not running", sandbox.ErrNotFound, containerID)
	}
	c.mu.Lock()
	elapsed := int64(time.Since(c.startedAt) / time.Second)
	c.mu.Unlock()
	return []sandbox.Process{{PID: 1, User: "sandbox", ElapsedS: elapsed, Command: c.command}}, nil
}

func (r *Runtime) KillProcess(ctx context.Context, containerID string, pid int, signal string) error {
	c, down := r.lookup(containerID)
	if down {
		return engineDown()
	}
	if _, err := sandbox.KillCommand(pid, signal); err != nil {
		return err // the same checks as the engines' kill
	}
	n, _ := signalNumber(signal)
	if c == nil || !c.isRunning() || pid != 1 {
		return sandbox.ErrNoSuchProcess
	}
	c.signal(n)
	return nil
}

func (e *Engine) isDown() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.down
}
