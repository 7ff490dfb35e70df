package tools

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/output"
)

// progressInterval throttles progress notifications of one waiting call.
const progressInterval = time.Second

// startProgress sends throttled progress notifications about a job while a
// call waits for it, when the client asked for them with a progress token.
// The returned stop must be called before the call's result is returned: it
// ends the notifications and waits until all that were sent are written.
func (d Deps) startProgress(ctx context.Context, req mcp.CallToolRequest, jobID string) (stop func()) {
	if d.Notifier == nil || req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return func() {}
	}
	token := req.Params.Meta.ProgressToken
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		started := time.Now()
		n := 0.0
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rec, err := d.Jobs.Get(ctx, jobID)
			if err != nil {
				return
			}
			msg := fmt.Sprintf("%s for %ds, %d bytes of output", rec.Status, int(time.Since(started).Seconds()), rec.StdoutBytes+rec.StderrBytes)
			if last := d.lastLine(ctx, jobID); last != "" {
				msg += ": " + last
			}
			select {
			case <-quit: // the call is returning: send nothing more
				return
			default:
			}
			n++
			d.Notifier.Progress(ctx, token, n, msg)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
			d.Notifier.Flush(ctx, token)
		})
	}
}

func (d Deps) lastLine(ctx context.Context, jobID string) string {
	res, err := d.Jobs.Tail(ctx, jobID, 1, 4096)
	if err != nil {
		return ""
	}
	return output.LastLine(res)
}
