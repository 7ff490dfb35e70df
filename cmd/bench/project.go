package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/images"
)

// projectRuns is how many samples each project row takes (imports are
// seconds long, so few).
const projectRuns = 5

// project measures the user's-project features: a job with a granted
// mount against a plain warm job; an import of 2,000 files and 20 MB
// against `docker cp` of the same tree; a fork of that workspace.
func project(ctx context.Context, o options) error {
	tree, err := os.MkdirTemp("", "sandboxer-bench-tree-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	if err := makeTree(tree, 2000, 20<<20); err != nil {
		return err
	}
	s, err := startServer(ctx, o, "project", fmt.Sprintf("mounts:\n  - {name: tree, source: %s}\n", tree))
	if err != nil {
		return err
	}
	defer s.close()
	settle := func() { time.Sleep(300 * time.Millisecond) } // the pool refills between calls
	timed := func(n int, f func() error) (stats, error) {
		var st stats
		for i := 0; i < n; i++ {
			settle()
			t0 := time.Now()
			if err := f(); err != nil {
				return nil, err
			}
			st = append(st, time.Since(t0))
		}
		return st, nil
	}
	progress("project: plain warm jobs and jobs with a mount")
	plainJob := func() error { _, err := s.runJob(ctx, map[string]any{"command": "true"}); return err }
	mountJob := func() error {
		_, err := s.runJob(ctx, map[string]any{"command": "test -f /mnt/tree/d00/f0000", "mounts": []any{"tree"}})
		return err
	}
	for i := 0; i < 3; i++ { // three uses: the pool follows the mount set
		settle()
		if err := mountJob(); err != nil {
			return err
		}
	}
	plain, err := timed(o.runs, plainJob)
	if err != nil {
		return err
	}
	mounted, err := timed(o.runs, mountJob)
	if err != nil {
		return err
	}

	progress("project: docker cp of the tree x%d", projectRuns)
	image := images.Tag("base")
	var cp stats
	for i := 0; i < projectRuns; i++ {
		out, err := exec.CommandContext(ctx, "docker", "create", "--network", "none", "-v", "/workspace", image, "true").Output()
		if err != nil {
			return fmt.Errorf("docker create: %w", err)
		}
		id := strings.TrimSpace(string(out))
		t0 := time.Now()
		err = exec.CommandContext(ctx, "docker", "cp", tree+"/.", id+":/workspace").Run()
		cp = append(cp, time.Since(t0))
		_ = exec.Command("docker", "rm", "-f", "-v", id).Run()
		if err != nil {
			return fmt.Errorf("docker cp: %w", err)
		}
	}
	progress("project: create_workspace plain, with import, with from x%d", projectRuns)
	var plainWS, importWS, forkWS stats
	for i := 0; i < projectRuns; i++ {
		name := fmt.Sprintf("bench-proj-%d-%d", os.Getpid(), i)
		for _, c := range []struct {
			st   *stats
			name string
			args map[string]any
		}{
			{&plainWS, name + "-p", map[string]any{}},
			{&importWS, name + "-i", map[string]any{"import": "tree"}},
			{&forkWS, name + "-f", map[string]any{"from": name + "-i"}},
		} {
			c.args["name"] = c.name
			t0 := time.Now()
			_, err := s.call(ctx, "create_workspace", c.args)
			*c.st = append(*c.st, time.Since(t0))
			if err != nil {
				return err
			}
		}
		for _, suffix := range []string{"-p", "-f", "-i"} {
			_, _ = s.call(ctx, "delete_workspace", map[string]any{"name": name + suffix})
		}
	}
	copyOnly := func(st stats) time.Duration { return st.p50() - plainWS.p50() }
	fmt.Printf("\n%-50s %10s %10s %7s  %s\n", "the user's project", "base ms", "ours ms", "ratio", "goal")
	mr := float64(mounted.p50()) / float64(plain.p50())
	fmt.Printf("%-50s %10.1f %10.1f %7.2f  <= 3 %s\n", "run_command with a mount vs a plain warm job (p50)", ms(plain.p50()), ms(mounted.p50()), mr, yes(mr <= 3))
	ir := float64(copyOnly(importWS)) / float64(cp.p50())
	fmt.Printf("%-50s %10.1f %10.1f %7.2f  <= 2 %s\n", "import 2,000 files, 20 MB (copy) vs docker cp", ms(cp.p50()), ms(copyOnly(importWS)), ir, yes(ir <= 2))
	fmt.Printf("%-50s %10.1f %10.1f %7.2f\n", "  whole create_workspace with import vs plain", ms(plainWS.p50()), ms(importWS.p50()), float64(importWS.p50())/float64(plainWS.p50()))
	fr := float64(copyOnly(forkWS)) / float64(cp.p50())
	fmt.Printf("%-50s %10.1f %10.1f %7.2f\n", "fork of that workspace (copy) vs docker cp", ms(cp.p50()), ms(copyOnly(forkWS)), fr)
	fmt.Printf("%-50s %10.1f %10.1f %7.2f\n", "  whole create_workspace with from vs plain", ms(plainWS.p50()), ms(forkWS.p50()), float64(forkWS.p50())/float64(plainWS.p50()))
	return nil
}

// makeTree writes files files of total bytes in all, 100 to a directory.
func makeTree(dir string, files int, total int64) error {
	size := total / int64(files)
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte('a' + i%26)
		if i%80 == 79 {
			buf[i] = '\n'
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for i := 0; i < files; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%02d", i/100))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}
