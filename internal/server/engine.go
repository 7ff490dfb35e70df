package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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

// checkEscapes refuses to serve when the policy's runtime is one the
// engine lacks, logs what is known of the engine and the runtime its
// sandboxes use against the table of known escapes, and, with the
// policy's refuse_known_escapes, refuses to serve on a hit. An engine that
// does not answer now is not checked (its first sandbox waits for it).
func (s *Server) checkEscapes(ctx context.Context) error {
	b, err := backend.Of(s.cfg.Policy)
	if err != nil || b.Findings == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	findings, err := b.Findings(ctx, s.engine, s.cfg.Policy)
	if err != nil {
		s.log.Warn().Err(err).Msg("known escapes: the engine does not answer: not checked")
		return nil
	}
	var hits []string
	for _, f := range findings {
		if f.Missing != nil {
			return errors.New(f.Sentence())
		}
		switch {
		case len(f.Open()) > 0:
			s.log.Warn().Str("fix", backend.FixCommand).Msg(f.Sentence())
			hits = append(hits, f.Sentence())
		case f.Unread != "":
			s.log.Warn().Msg(f.Sentence())
		default:
			s.log.Info().Msg(f.Sentence())
		}
	}
	if len(hits) > 0 && s.cfg.Policy.RefuseKnownEscapes {
		return fmt.Errorf("policy refuse_known_escapes: %s; %s", strings.Join(hits, "; "), backend.FixCommand)
	}
	return nil
}
