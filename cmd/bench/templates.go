package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/template"
)

// templatesBench measures templates (docs/templates.md) against the
// engine's own cache in the same run: an unchanged `sandboxer templates
// build` (a process: config, store, key, lookup) and an unchanged
// in-server build (the key from the memo, a lookup) against `docker build`
// of the same context, all layers cached; and how long after a failing
// RUN step's last line its error arrives.
func templatesBench(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "sandboxer-bench-templates")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctxDir := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(ctxDir, 0o755); err != nil {
		return err
	}
	df := "FROM sandboxer/base:latest\nCOPY data /opt/data\nRUN wc -c /opt/data > /tmp/size\n"
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "data"), make([]byte, 8<<20), 0o644); err != nil {
		return err
	}
	broken := filepath.Join(dir, "broken")
	os.MkdirAll(broken, 0o755)
	os.WriteFile(filepath.Join(broken, "Dockerfile"), []byte("FROM sandboxer/base:latest\nRUN echo about-to-fail; exit 3\n"), 0o644)
	name := fmt.Sprintf("bench%d", time.Now().UnixNano()%1_000_000)
	policyYAML := fmt.Sprintf("templates:\n  %s: {context: %s}\n  %sx: {context: %s}\n", name, ctxDir, name, broken)
	policyPath := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policyPath, []byte(policyYAML), 0o644)
	defer exec.Command("sh", "-c", "docker rmi -f $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^sandboxer/template-"+name+"x?(-core)?:') bench-templates:"+name+" >/dev/null 2>&1").Run()

	pol, err := policy.Load(policyPath)
	if err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(dir, "sandboxer.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	rt, err := docker.New("bench-templates")
	if err != nil {
		return err
	}
	defer rt.Close()
	m := template.New(pol, rt.Capabilities().Images, st, nil, zerolog.Nop())

	progress("templates: first build of %s (8 MiB context)", name)
	start := time.Now()
	if _, _, err := m.Build(ctx, name, template.BuildOptions{}); err != nil {
		return err
	}
	first := time.Since(start)
	dockerBuild := func() error {
		return exec.CommandContext(ctx, "docker", "build", "-q", "-t", "bench-templates:"+name, ctxDir).Run()
	}
	cli := func() error {
		c := exec.CommandContext(ctx, o.bin, "templates", "build", "--policy", policyPath, "--state-dir", dir, name)
		out, err := c.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "up to date") {
			return fmt.Errorf("templates build: %v: %s", err, out)
		}
		return nil
	}
	inServer := func() error {
		_, built, err := m.Build(ctx, name, template.BuildOptions{})
		if err == nil && built {
			err = errors.New("an unchanged template was built again")
		}
		return err
	}
	var dockerS, cliS, serverS stats
	progress("templates: unchanged builds x%d, interleaved", o.runs)
	for i := 0; i < o.runs+1; i++ {
		for _, c := range []struct {
			s *stats
			f func() error
		}{{&dockerS, dockerBuild}, {&cliS, cli}, {&serverS, inServer}} {
			start := time.Now()
			if err := c.f(); err != nil {
				return err
			}
			if i > 0 { // the first round warms up
				*c.s = append(*c.s, time.Since(start))
			}
		}
	}
	var failS stats
	progress("templates: a failing step x%d", o.runs)
	for i := 0; i < o.runs; i++ {
		var lastLine time.Time
		_, _, err := m.Build(ctx, name+"x", template.BuildOptions{NoCache: true, Progress: func(l string) {
			if strings.Contains(l, "about-to-fail") && !strings.Contains(l, "RUN") {
				lastLine = time.Now()
			}
		}})
		var be *sandbox.BuildError
		if !errors.As(err, &be) || lastLine.IsZero() {
			return fmt.Errorf("the broken template: %v (its last line seen: %v)", err, !lastLine.IsZero())
		}
		failS = append(failS, time.Since(lastLine))
	}
	fmt.Printf("\n## Templates (%d runs each, interleaved; docker build of the same context as the baseline)\n\n", o.runs)
	fmt.Printf("| case | p50 ms | max ms | vs docker build |\n|---|---|---|---|\n")
	fmt.Printf("| first build (8 MiB context) | %.0f | | |\n", ms(first))
	fmt.Printf("| docker build -q, unchanged (all layers cached) | %.1f | %.1f | 1.00 |\n", ms(dockerS.p50()), ms(dockerS.pct(1)))
	fmt.Printf("| sandboxer templates build, unchanged (a process) | %.1f | %.1f | %.2f |\n", ms(cliS.p50()), ms(cliS.pct(1)), ms(cliS.p50())/ms(dockerS.p50()))
	fmt.Printf("| in the server, unchanged (key memo, lookup) | %.1f | %.1f | %.2f |\n", ms(serverS.p50()), ms(serverS.pct(1)), ms(serverS.p50())/ms(dockerS.p50()))
	fmt.Printf("| failing RUN: its error after its last line | %.1f | %.1f | |\n", ms(failS.p50()), ms(failS.pct(1)))
	return snapshotBench(ctx, o)
}

// snapshotBench measures snapshot_workspace of a workspace holding 100 MiB
// of files against `docker commit` of the same container, interleaved.
// The snapshot does more than the commit (it packs the files and builds the
// core and final images), so the ratio says what that costs.
func snapshotBench(ctx context.Context, o options) error {
	s, err := startServer(ctx, o, "snapshot", "templates_build: {max_context_mb: 512}\n", "SANDBOXER_TOOLSETS=all")
	if err != nil {
		return err
	}
	defer s.close()
	name := fmt.Sprintf("benchsnap%d", time.Now().UnixNano()%1_000_000)
	defer exec.Command("sh", "-c", "docker rmi -f $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E -- '-"+name+"(-core|-root)?:') bench-snapshot:"+name+" >/dev/null 2>&1").Run()
	if _, err := s.call(ctx, "create_workspace", map[string]any{"name": name}); err != nil {
		return err
	}
	defer s.call(context.WithoutCancel(ctx), "delete_workspace", map[string]any{"name": name})
	if _, err := s.call(ctx, "run_command", map[string]any{"workspace": name, "timeout_s": 300,
		"command": "head -c 100M /dev/urandom > big.bin; mkdir -p many; for i in $(seq 500); do echo $i > many/f$i; done"}); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--filter", "name=sandboxer-ws-"+name+"-").Output()
	container := strings.TrimSpace(string(out))
	if err != nil || container == "" || strings.Contains(container, "\n") {
		return fmt.Errorf("the workspace's container: %q %v", container, err)
	}
	var snapS, commitS stats
	progress("templates: snapshot_workspace (100 MiB of files) against docker commit x%d, interleaved", o.runs)
	for i := 0; i < o.runs; i++ {
		start := time.Now()
		if _, err := s.call(ctx, "snapshot_workspace", map[string]any{"workspace": name, "template": name}); err != nil {
			return err
		}
		snapS = append(snapS, time.Since(start))
		start = time.Now()
		if out, err := exec.CommandContext(ctx, "docker", "commit", container, "bench-snapshot:"+name).CombinedOutput(); err != nil {
			return fmt.Errorf("docker commit: %v: %s", err, out)
		}
		commitS = append(commitS, time.Since(start))
	}
	fmt.Printf("\n## Snapshots (%d runs each, interleaved; docker commit of the same container as the baseline)\n\n", o.runs)
	fmt.Printf("| case | p50 ms | max ms | vs docker commit |\n|---|---|---|---|\n")
	fmt.Printf("| docker commit of the workspace's container | %.0f | %.0f | 1.00 |\n", ms(commitS.p50()), ms(commitS.pct(1)))
	fmt.Printf("| snapshot_workspace, 100 MiB of files | %.0f | %.0f | %.2f |\n", ms(snapS.p50()), ms(snapS.pct(1)), ms(snapS.p50())/ms(commitS.p50()))
	return nil
}
