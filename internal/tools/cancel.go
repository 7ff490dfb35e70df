package tools

import (
	"context"
	"errors"
	"strings"
)

// CancelledError is the cause of a call's context when the client cancelled
// the call with MCP notifications/cancelled; Reason is the notification's
// optional reason ("" when it gave none). The transport layer
// (internal/mcpserver) sets it; handlers read it with CancelReason.
type CancelledError struct{ Reason string }

func (e *CancelledError) Error() string {
	if e.Reason == "" {
		return "cancelled by the client"
	}
	return "cancelled by the client: " + e.Reason
}

// CancelReason returns the reason the client gave when it cancelled the call
// that ctx belongs to; ok is false when the call was not cancelled by the
// client, or was cancelled without a reason.
func CancelReason(ctx context.Context) (reason string, ok bool) {
	var ce *CancelledError
	if errors.As(context.Cause(ctx), &ce) && ce.Reason != "" {
		return ce.Reason, true
	}
	return "", false
}

type keepOnCancelKey struct{}

// WithKeepOnCancel marks the calls of a transport that cannot tell a
// client's timeout from a deliberate cancellation (Streamable HTTP: a
// dropped request and a cancel look alike): their jobs outlive a cancelled
// call, and kill_job stops them.
func WithKeepOnCancel(ctx context.Context) context.Context {
	return context.WithValue(ctx, keepOnCancelKey{}, true)
}

// keepsJob says whether a cancelled call leaves its job running.
func keepsJob(ctx context.Context) (why string, keep bool) {
	if reason, ok := CancelReason(ctx); ok && ClientTimedOut(reason) {
		return "the client's request timeout (" + reason + ")", true
	}
	if v, _ := ctx.Value(keepOnCancelKey{}).(bool); v {
		return "the client (over HTTP a cancelled or dropped call leaves its job running)", true
	}
	return "", false
}

// ClientTimedOut says whether a cancellation reason means the client gave up
// only because its own request timed out, rather than to stop the work.
// The reasons clients send (params.reason of notifications/cancelled):
//
//   - TypeScript SDK 1.x (src/shared/protocol.ts): String(McpError) on its
//     60 s default timeout = "McpError: MCP error -32001: Request timed out";
//     an AbortSignal abort sends String(signal.reason), by default
//     "AbortError: This operation was aborted".
//   - TypeScript SDK 2.x (packages/core-internal/src/shared/protocol.ts):
//     String(SdkError) = "SdkError: Request timed out".
//   - Python SDK 2.x (src/mcp/shared/jsonrpc_dispatcher.py): "timed out after
//     30.0s" on a timeout, "caller cancelled" otherwise (1.x sends no
//     cancellation on a timeout).
//   - mcp-go's client (client/client.go cancelRequest): ctx.Err().Error(), so
//     "context deadline exceeded" when the caller's deadline passed and
//     "context canceled" when the caller cancelled.
func ClientTimedOut(reason string) bool {
	r := strings.ToLower(reason)
	for _, s := range []string{"timed out", "timeout", "-32001", "deadline exceeded"} {
		if strings.Contains(r, s) {
			return true
		}
	}
	return false
}
