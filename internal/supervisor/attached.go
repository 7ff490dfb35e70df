package supervisor

import (
	"context"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// closeStdinTimeout bounds how long sending a job's end of input waits.
const closeStdinTimeout = 30 * time.Second

// Attached is what every engine's sandbox.Handle forwards to its job's
// supervisor, written once: input with flow control, its end, resizes and
// signals while the stream is open. An engine's handle embeds it and adds
// what only the engine does (Destroy, and its own way to signal a job whose
// stream is gone).
type Attached struct {
	C *Client // the supervisor's stream
}

// Attach is the part of a handle that speaks to a new job's supervisor.
func Attach() Attached { return Attached{C: New()} }

// WriteStdin sends p as Data frames, with the supervisor's flow control.
func (a Attached) WriteStdin(ctx context.Context, p []byte) (int, error) {
	return a.C.WriteStdin(ctx, p)
}

// KeepsStdin: the job was adopted with its stdin (sandbox.Handle).
func (a Attached) KeepsStdin() bool { return a.C.Kept }

// CloseStdin sends end-of-file to the job, after writes in progress.
func (a Attached) CloseStdin() error { return a.C.CloseStdin(closeStdinTimeout) }

// Resize changes a TTY job's terminal size.
func (a Attached) Resize(ctx context.Context, rows, cols uint16) error {
	return a.C.Resize(ctx, rows, cols)
}

// SignalFrame sends signal to the job through its supervisor while the
// stream is open. attached false: it is not (adopted, or ended), and the
// engine delivers the signal another way, if it has one.
func (a Attached) SignalFrame(ctx context.Context, signal string) (attached bool, err error) {
	if a.C.W == nil || a.C.Ended() {
		return false, nil
	}
	return true, a.C.WriteFrame(ctx, proto.TypeSignal, []byte(signal))
}
