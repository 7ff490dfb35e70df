package tools

import (
	"context"
	"testing"
)

func TestClientTimedOut(t *testing.T) {
	for reason, want := range map[string]bool{
		"McpError: MCP error -32001: Request timed out": true,
		"SdkError: Request timed out":                   true,
		"timed out after 30.0s":                         true,
		"Request Timeout":                               true,
		"error -32001":                                  true,
		"context deadline exceeded":                     true,
		"context canceled":                              false,
		"":                                              false,
		"user aborted":                                  false,
		"AbortError: This operation was aborted":        false,
		"caller cancelled":                              false,
	} {
		if got := ClientTimedOut(reason); got != want {
			t.Errorf("ClientTimedOut(%q) = %v, want %v", reason, got, want)
		}
	}
}

func TestCancelReason(t *testing.T) {
	if _, ok := CancelReason(context.Background()); ok {
		t.Error("reason on a live context")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&CancelledError{Reason: "user aborted"})
	if r, ok := CancelReason(ctx); !ok || r != "user aborted" {
		t.Errorf("got %q %v", r, ok)
	}
	ctx, cancel = context.WithCancelCause(context.Background())
	cancel(&CancelledError{})
	if _, ok := CancelReason(ctx); ok {
		t.Error("empty reason reported")
	}
	ctx, plain := context.WithCancel(context.Background())
	plain()
	if _, ok := CancelReason(ctx); ok {
		t.Error("plain cancel reported a reason")
	}
}
