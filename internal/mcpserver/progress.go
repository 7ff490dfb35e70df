package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// flushTimeout bounds how long a call waits for its progress notifications to
// be written before it returns its result.
const flushTimeout = 2 * time.Second

// progressWriter wraps the transport's output and counts, per progress
// token, the progress notifications actually written. mcp-go writes
// notifications from its own goroutine, so without this a notification sent
// just before a result could be written after it.
type progressWriter struct {
	out io.Writer

	mu      sync.Mutex
	cond    *sync.Cond
	sent    map[string]int
	written map[string]int
}

func newProgressWriter(out io.Writer) *progressWriter {
	w := &progressWriter{out: out, sent: map[string]int{}, written: map[string]int{}}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// tokenKey is a token as a map key; JSON numbers of any Go type compare equal.
func tokenKey(token mcp.ProgressToken) string {
	t := normalize(token)
	return fmt.Sprintf("%T:%v", t, t)
}

var progressMethod = []byte(`"method":"notifications/progress"`)

// Write is called once per message line by the transport.
func (w *progressWriter) Write(p []byte) (int, error) {
	n, err := w.out.Write(p)
	if bytes.Contains(p, progressMethod) {
		var msg struct {
			Params struct {
				ProgressToken any `json:"progressToken"`
			} `json:"params"`
		}
		if json.Unmarshal(p, &msg) == nil && msg.Params.ProgressToken != nil {
			w.mu.Lock()
			w.written[tokenKey(msg.Params.ProgressToken)]++
			w.cond.Broadcast()
			w.mu.Unlock()
		}
	}
	return n, err
}

// normalize maps JSON numbers to one Go type so tokens compare equal.
func normalize(token any) any {
	switch t := token.(type) {
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
	case int:
		return int64(t)
	case int32:
		return int64(t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
	}
	return token
}

// notifier implements tools.Notifier on an MCP server and a progressWriter.
type notifier struct {
	srv *server.MCPServer
	w   *progressWriter
}

func (n *notifier) Progress(ctx context.Context, token mcp.ProgressToken, progress float64, message string) bool {
	key := tokenKey(token)
	err := n.srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), map[string]any{
		"progressToken": token, "progress": progress, "message": message,
	})
	if err != nil {
		return false
	}
	if n.w != nil {
		n.w.mu.Lock()
		n.w.sent[key]++
		n.w.mu.Unlock()
	}
	return true
}

func (n *notifier) Flush(ctx context.Context, token mcp.ProgressToken) {
	if n.w == nil {
		return
	}
	key := tokenKey(token)
	deadline := time.Now().Add(flushTimeout)
	timer := time.AfterFunc(flushTimeout, func() {
		n.w.mu.Lock()
		n.w.cond.Broadcast()
		n.w.mu.Unlock()
	})
	defer timer.Stop()
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	for n.w.written[key] < n.w.sent[key] && time.Now().Before(deadline) {
		n.w.cond.Wait()
	}
	delete(n.w.sent, key)
	delete(n.w.written, key)
}
