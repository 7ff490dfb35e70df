package egress

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// tunnelAt is an EgressTunneler whose tunnel listens at a fixed address.
type tunnelAt string

func (a tunnelAt) TunnelEgress(http.Handler) string { return string(a) }

type discard struct{}

func (discard) Write(sandbox.Stream, []byte) {}

// A job's grant is kept while it runs and given back, token and all, to
// the runtime of a restarted server that adopts the job; its hosts are
// checked against the policy of then; it is forgotten when the job ends.
func TestGrantKeptForAdoption(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	allow, _ := ParseList([]string{"api.example.com", "mirror.example.com"})
	secretHosts, _ := ParseList([]string{"api.example.com"})
	cfg := Config{Allow: allow, CA: ca, GrantsDir: filepath.Join(dir, "grants"),
		Secrets: map[string]Secret{"TOKEN": {Hosts: secretHosts, Read: func() ([]byte, error) { return []byte("v"), nil }}}}
	engine := fake.NewEngine()
	r1 := StartTunneled(engine.Runtime("inst", "s1"), tunnelAt("127.0.0.1:3128"), cfg)
	ctx := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	spec := sandbox.Spec{JobID: "j1", Kind: "command", Image: "img", Cmd: []string{"bash", "-c", "sleep 30"}, Network: sandbox.NetworkEgress,
		Egress: []string{"mirror.example.com"}, Secrets: []sandbox.SecretUse{{Name: "TOKEN"}}}
	h, err := r1.Through(ctx, spec, discard{}, r1.Runtime.Start)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := filepath.Glob(filepath.Join(cfg.GrantsDir, "*.json"))
	if len(kept) != 1 {
		t.Fatalf("kept grants: %v", kept)
	}
	if fi, _ := os.Stat(kept[0]); fi.Mode().Perm() != 0o600 {
		t.Errorf("a kept grant's mode is %v", fi.Mode())
	}
	var token string
	var first Grant
	for tk, g := range r1.proxy.grants {
		token, first = tk, g
	}

	// The restarted server's runtime adopts the job: the same token, hosts and placeholder.
	r2 := StartTunneled(engine.Runtime("inst", "s2"), tunnelAt("127.0.0.1:3128"), cfg)
	h2, err := r2.Adopt(context.Background(), h.ContainerID(), 0, 0, discard{})
	if err != nil {
		t.Fatal(err)
	}
	g, ok := r2.proxy.grants[token]
	if !ok || g.Tenant != "alice" || g.Job != "j1" || g.Allow.String() != first.Allow.String() ||
		len(g.Secrets) != 1 || g.Secrets[0].Placeholder != first.Secrets[0].Placeholder {
		t.Fatalf("adopted grant %+v, want %+v", g, first)
	}
	if !slices.ContainsFunc(g.Allow, func(r Rule) bool { return r.String() == "mirror.example.com" }) {
		t.Errorf("the job's own host is missing: %v", g.Allow)
	}
	_ = h2.Destroy(context.Background())
	select {
	case <-h2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted job did not end")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		kept, _ = filepath.Glob(filepath.Join(cfg.GrantsDir, "*.json"))
		r2.proxy.mu.Lock()
		_, still := r2.proxy.grants[token]
		r2.proxy.mu.Unlock()
		if len(kept) == 0 && !still {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the job ended: kept %v, grant still registered %v", kept, still)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A kept grant whose hosts the policy no longer allows is not given back.
	h3, err := r1.Through(ctx, spec, discard{}, r1.Runtime.Start)
	if err != nil {
		t.Fatal(err)
	}
	narrower, _ := ParseList([]string{"api.example.com"})
	cfg.Allow = narrower
	r3 := StartTunneled(engine.Runtime("inst", "s3"), tunnelAt("127.0.0.1:3128"), cfg)
	if _, err := r3.Adopt(context.Background(), h3.ContainerID(), 0, 0, discard{}); err == nil {
		t.Error("a grant beyond the policy of now was given back")
	}
	_ = h3.Destroy(context.Background())
}
