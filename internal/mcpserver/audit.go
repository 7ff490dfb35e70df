package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/memtrim"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// Option configures New.
type Option func(*Server)

// WithAudit writes an audit line for every tool call that runs or changes
// anything (every tool not annotated read-only, including tools added later).
func WithAudit(l *audit.Log, serverID string) Option {
	return func(s *Server) { s.audit, s.serverID = l, serverID }
}

// WithObserver tells o of every tool call and its time (metrics).
func WithObserver(o observe.Observer) Option {
	return func(s *Server) { s.observer = o }
}

// WithCallTimelines keeps a timeline of each tools/call on stdio, from its
// line's arrival to its answer's write, and hands it to log once written
// (the job manager, the pool and the supervisor mark it on the way).
func WithCallTimelines(log func(*observe.Timeline)) Option {
	return func(s *Server) { s.wire.trace = log }
}

// WithIdleTrim tells t of every tool call, so that it trims the server's
// memory only while no call runs (internal/memtrim).
func WithIdleTrim(t *memtrim.Trimmer) Option {
	return func(s *Server) { s.trim = t }
}

// trimMiddleware marks each tool call busy for the idle trimmer.
func (s *Server) trimMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if s.trim == nil {
			return next(ctx, req)
		}
		s.trim.Begin()
		defer s.trim.End()
		return next(ctx, req)
	}
}

// metricsMiddleware is the mcp-go tool middleware behind the tool families.
func (s *Server) metricsMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if s.observer == nil {
			return next(ctx, req)
		}
		start := time.Now()
		res, err := next(ctx, req)
		s.observer.ToolCall(req.Params.Name, err != nil || res != nil && res.IsError, time.Since(start))
		return res, err
	}
}

// auditCommandBytes caps the command kept in one audit line.
const auditCommandBytes = 4096

// auditMiddleware is the mcp-go tool middleware behind the audit log.
func (s *Server) auditMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		name := req.Params.Name
		if s.audit == nil || s.readOnly[name] {
			return next(ctx, req)
		}
		ctx, note := audit.WithNote(ctx)
		start := time.Now()
		res, err := next(ctx, req)
		e := audit.Entry{Time: start, Client: tools.ClientName(ctx), Tenant: tenant.Owner(ctx), Server: s.serverID, Tool: name, DurationMS: time.Since(start).Milliseconds()}
		args := req.GetArguments()
		var secrets []string
		if env, ok := args["env"].(map[string]any); ok {
			for k, v := range env {
				e.EnvKeys = append(e.EnvKeys, truncateUTF8(k, 128))
				if sv, ok := v.(string); ok {
					secrets = append(secrets, sv)
				}
			}
			sort.Strings(e.EnvKeys)
		}
		if c, ok := args["command"].(string); ok {
			e.Command = audit.RedactValues(truncateUTF8(c, auditCommandBytes), secrets)
		}
		// Scripts and typed input may carry anything: only their hash is kept.
		for _, k := range []string{"code", "script", "text", "stdin"} {
			if v, ok := args[k].(string); ok && v != "" {
				sum := sha256.Sum256([]byte(v))
				e.ScriptSHA256 = hex.EncodeToString(sum[:])
				break
			}
		}
		decision, rule, jobID := note.Get()
		var out struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		}
		if res != nil && res.StructuredContent != nil {
			if b, err := json.Marshal(res.StructuredContent); err == nil {
				_ = json.Unmarshal(b, &out)
			}
		}
		switch {
		case jobID != "":
			e.JobID = jobID
		case out.JobID != "":
			e.JobID = out.JobID
		default:
			if id, ok := args["job_id"].(string); ok {
				e.JobID = truncateUTF8(id, 64)
			}
		}
		switch {
		case err != nil:
			e.Outcome, e.Error = "error", audit.RedactValues(truncateUTF8(err.Error(), 1000), secrets)
		case res != nil && res.IsError:
			e.Outcome, e.Error = "error", audit.RedactValues(truncateUTF8(resultText(res), 1000), secrets)
		case out.Status != "":
			e.Outcome = out.Status
		default:
			e.Outcome = "ok"
		}
		if e.Outcome == "error" && note.HasRun() {
			e.Outcome = "failed" // it ran, and its work failed (an install)
		}
		switch {
		case decision != "":
			e.Decision, e.Rule = decision, rule
		case e.Outcome == "error" && e.JobID == "":
			e.Decision = audit.Refused
		default:
			e.Decision = audit.Allowed
		}
		if werr := s.audit.Write(e); werr != nil && s.logf != nil {
			s.logf("audit log: %v", werr)
		}
		return res, err
	}
}

func resultText(res *mcp.CallToolResult) string { return tools.ResultText(res) }

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
