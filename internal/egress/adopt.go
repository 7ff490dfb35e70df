package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// A grant is kept under Config.GrantsDir for as long as its job runs, one
// file per sandbox, so a server that adopts the job after a restart gives
// it back its grant: the same token (in the job's HTTP_PROXY), its hosts
// (checked against the policy of now) and its secrets' placeholders, never
// a value. The proxy listens on the port the kept grants name when it can.
type keptGrant struct {
	Token   string              `json:"token"`
	Tenant  string              `json:"tenant"`
	Job     string              `json:"job"`
	Allow   []string            `json:"allow"` // the job's own hosts, secrets' aside
	Secrets []sandbox.SecretUse `json:"secrets,omitempty"`
	Addr    string              `json:"addr"` // the proxy's, as the job has it
}

// unsafeName is what a sandbox's id may hold that a file name must not (a
// workspace job's id has a slash).
var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

func (r *Runtime) grantFile(containerID string) string {
	return filepath.Join(r.cfg.GrantsDir, unsafeName.ReplaceAllString(containerID, "_")+".json")
}

// keep writes g for the sandbox; the returned func removes it.
func (r *Runtime) keep(containerID string, g keptGrant) func() {
	if r.cfg.GrantsDir == "" {
		return func() {}
	}
	path := r.grantFile(containerID)
	data, _ := json.Marshal(g)
	if err := os.MkdirAll(r.cfg.GrantsDir, 0o700); err == nil {
		tmp := path + ".tmp"
		if os.WriteFile(tmp, data, 0o600) == nil {
			_ = os.Rename(tmp, path)
		}
	}
	return func() { _ = os.Remove(path) }
}

// keptPort is the proxy port the kept grants name ("" if none).
func keptPort(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range files {
		var g keptGrant
		if data, err := os.ReadFile(f); err == nil && json.Unmarshal(data, &g) == nil {
			if _, port, err := net.SplitHostPort(g.Addr); err == nil {
				return port
			}
		}
	}
	return ""
}

// Adopt takes over a job a previous server started and gives it back its
// grant, when one was kept for its sandbox.
func (r *Runtime) Adopt(ctx context.Context, containerID string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	if r.cfg.GrantsDir == "" {
		return r.Runtime.Adopt(ctx, containerID, skipStdout, skipStderr, out)
	}
	path := r.grantFile(containerID)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r.Runtime.Adopt(ctx, containerID, skipStdout, skipStderr, out)
	}
	var kept keptGrant
	if err == nil {
		err = json.Unmarshal(data, &kept)
	}
	if err != nil {
		return nil, fmt.Errorf("egress: the grant kept for %.12s: %w", containerID, err)
	}
	forget := func() { _ = os.Remove(path) }
	if kept.Addr != r.addr {
		// The proxy could not listen where the job has it: the job runs
		// on, its requests through the proxy unanswered.
		forget()
		return r.Runtime.Adopt(ctx, containerID, skipStdout, skipStderr, out)
	}
	g, redact, err := r.grant(kept.Tenant, kept.Job, kept.Allow, kept.Secrets, out)
	if err != nil {
		forget()
		return nil, fmt.Errorf("egress: the grant of job %s: %w", kept.Job, err)
	}
	if redact != nil {
		out = redact
	}
	revoke := r.proxy.addToken(kept.Token, g)
	h, err := r.Runtime.Adopt(ctx, containerID, skipStdout, skipStderr, out)
	if err != nil {
		revoke()
		return nil, err
	}
	return r.hold(h, redact, func() { revoke(); forget() }), nil
}

// prune removes kept grants whose sandboxes are gone (a server that
// crashed left them).
func (r *Runtime) prune(ctx context.Context) {
	if r.cfg.GrantsDir == "" {
		return
	}
	cs, err := r.Runtime.List(ctx)
	if err != nil {
		return
	}
	alive := map[string]bool{}
	for _, c := range cs {
		alive[r.grantFile(c.ID)] = true
	}
	files, _ := filepath.Glob(filepath.Join(r.cfg.GrantsDir, "*.json"))
	for _, f := range files {
		if !alive[f] { // a workspace job's too: its exec died with its server
			_ = os.Remove(f)
		}
	}
}
