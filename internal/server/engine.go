package server

import (
	"github.com/sandboxer/sandboxer/internal/backend"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// NewEngine connects to the backend the policy names (its row of
// internal/backend's table); onError (may be nil) counts failed engine
// calls. Everything else takes the engine's declared parts
// (sandbox.Capabilities), never its name.
func NewEngine(cfg *config.Config, server string, onError func(operation string)) (sandbox.Engine, error) {
	b, err := backend.Of(cfg.Policy)
	if err != nil {
		return nil, err
	}
	return b.Open(backend.Options{Policy: cfg.Policy, Instance: cfg.Instance(), Server: server, OnError: onError})
}
