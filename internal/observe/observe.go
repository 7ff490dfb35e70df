// Package observe is what the server's parts report as they work: one
// interface each part is given at construction (internal/metrics implements
// it), so no part knows the metrics library and none is wired afterwards.
package observe

import "time"

// Observer is told of events as they happen. Its methods must be cheap and
// must not block: they are called on the paths they count.
type Observer interface {
	// JobStarted: a job's sandbox started, after queued in the queue and
	// starting to make the sandbox.
	JobStarted(kind, language string, queued, starting time.Duration)
	// JobEnded: a job reached its final status after ran.
	JobEnded(kind, language, status, reason string, ran time.Duration)
	// ToolCall: an MCP tool call ended.
	ToolCall(tool string, failed bool, took time.Duration)
	// PoolTake: a job asked the warm pool for a sandbox of image.
	PoolTake(image string, hit bool)
	// Install: a package manager's run (install_packages, a dependency
	// cache, the Go build cache) ended.
	Install(manager string, ok bool)
	// BlockDecision: the block list decided on a command.
	BlockDecision(blocked bool, rule string)
	// EngineError: a call to the container engine failed.
	EngineError(operation string)
}

// Nop observes nothing: the parts' default, and the server's without metrics.
type Nop struct{}

func (Nop) JobStarted(string, string, time.Duration, time.Duration) {}
func (Nop) JobEnded(string, string, string, string, time.Duration)  {}
func (Nop) ToolCall(string, bool, time.Duration)                    {}
func (Nop) PoolTake(string, bool)                                   {}
func (Nop) Install(string, bool)                                    {}
func (Nop) BlockDecision(bool, string)                              {}
func (Nop) EngineError(string)                                      {}

// Or is o, or Nop when o is nil.
func Or(o Observer) Observer {
	if o == nil {
		return Nop{}
	}
	return o
}
