package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

// k8sRuns is how many `true` jobs each runtime runs per case.
const k8sRuns = 10

// kubernetesRuntimes times `true` on the Docker runtime and on the Kubernetes
// runtime in the same run, at the runtime level (sandbox.Runtime): cold is
// Start to Done, warm is a prepared sandbox's Launch to Done (its Prepare is
// not timed); then through a server on each backend (serverTrue). The
// cluster is the one KUBECONFIG names, else make k8s-cluster's
// (.k8s/sandboxer.kubeconfig).
func kubernetesRuntimes(ctx context.Context, o options) error {
	cfg := kubernetes.Config{}
	if os.Getenv("KUBECONFIG") == "" {
		cfg.Kubeconfig = ".k8s/sandboxer.kubeconfig"
		if _, err := os.Stat(cfg.Kubeconfig); err != nil {
			return errors.New("no cluster: run make k8s-cluster first, or set KUBECONFIG")
		}
	}
	instance := fmt.Sprintf("bench-kubernetes-%d", os.Getpid())
	k, err := kubernetes.New(instance, cfg)
	if err != nil {
		return err
	}
	defer k.Close()
	if err := k.Ping(ctx); err != nil {
		return err
	}
	d, err := docker.New(instance)
	if err != nil {
		return err
	}
	defer d.Close()
	spec := func() sandbox.Spec {
		return sandbox.Spec{JobID: fmt.Sprintf("bench-%d", time.Now().UnixNano()), Kind: "command",
			Image: images.Tag("base"), Cmd: []string{"true"}, WorkDir: "/workspace",
			Limits: sandbox.Limits{MemoryBytes: 256 << 20, NanoCPUs: 1e9, Pids: 128, OpenFiles: 1024,
				FileSizeBytes: 64 << 20, TmpBytes: 64 << 20, WorkdirBytes: 64 << 20, LogBytes: 1 << 20}}
	}
	wait := func(h sandbox.Handle) error {
		select {
		case <-h.Done():
		case <-time.After(time.Minute):
			return errors.New("a `true` job did not end within a minute")
		}
		if st := h.Status(); st.ExitCode != 0 {
			return fmt.Errorf("`true` exited %d", st.ExitCode)
		}
		return nil
	}
	type row struct {
		name       string
		cold, warm stats
	}
	var rows []row
	for _, rt := range []struct {
		name string
		w    sandbox.Warmer
	}{{"docker", d}, {"kubernetes", k}} {
		r := row{name: rt.name}
		progress("kubernetes: cold and warm true x%d on the %s runtime", k8sRuns, rt.name)
		for range k8sRuns {
			t0 := time.Now()
			h, err := rt.w.Start(ctx, spec(), &sandbox.Buffer{Max: 1024})
			if err != nil {
				return err
			}
			if err := wait(h); err != nil {
				return err
			}
			r.cold = append(r.cold, time.Since(t0))
			w, err := rt.w.Prepare(ctx, spec())
			if err != nil {
				return err
			}
			t0 = time.Now()
			h, err = w.Launch(ctx, spec(), &sandbox.Buffer{Max: 1024})
			if err != nil {
				_ = w.Discard(ctx)
				return err
			}
			if err := wait(h); err != nil {
				return err
			}
			r.warm = append(r.warm, time.Since(t0))
		}
		rows = append(rows, r)
	}
	fmt.Printf("\n## Kubernetes: `true` at the runtime level, %d jobs per case, same run\n\n", k8sRuns)
	fmt.Println("| runtime | cold p50 | cold p95 | warm p50 | warm p95 | cold vs Docker's |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.2f× |\n", r.name,
			ms(r.cold.p50()), ms(r.cold.p95()), ms(r.warm.p50()), ms(r.warm.p95()), float64(r.cold.p50())/float64(rows[0].cold.p50()))
	}
	kubeconfig := cfg.Kubeconfig
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if kubeconfig, err = filepath.Abs(kubeconfig); err != nil {
		return err
	}
	return serverTrue(ctx, o, kubeconfig)
}

// serverTrue times `run_command true` through a server on each backend in
// the same run, from the call to its result: cold with the pool off, warm
// with one warm bash sandbox (a pause between jobs lets the pool refill; the
// table says how many jobs a warm sandbox served). Both use a quarter CPU a
// job, what a 2-CPU node holds several pods of.
func serverTrue(ctx context.Context, o options, kubeconfig string) error {
	const common = "limits:\n  cpus:\n    default: 0.25\n"
	backends := []struct{ name, policy string }{
		{"docker", common},
		{"kubernetes", common + "backend: kubernetes\nkubernetes:\n  kubeconfig: " + kubeconfig + "\n"},
	}
	type row struct {
		name       string
		cold, warm stats
		served     int
	}
	var rows []row
	for _, b := range backends {
		r := row{name: b.name}
		progress("kubernetes: run_command true x%d cold, then warm, through a %s server", k8sRuns, b.name)
		s, err := startServer(ctx, o, b.name+"-cold", b.policy+"pool:\n  enabled: false\n")
		if err != nil {
			return err
		}
		r.cold, err = sample(k8sRuns, true, func() error {
			_, err := s.runJob(ctx, map[string]any{"command": "true"})
			return err
		})
		s.close()
		if err != nil {
			return err
		}
		s, err = startServer(ctx, o, b.name+"-warm", b.policy+"pool:\n  size: {bash: 1, python: 0}\n  max_total: 1\n")
		if err != nil {
			return err
		}
		var list sandbox.Runtime = s.rt
		if b.name == "kubernetes" {
			k, err := kubernetes.New((&config.Config{StateDir: s.stateDir}).Instance(), kubernetes.Config{Kubeconfig: kubeconfig})
			if err != nil {
				s.close()
				return err
			}
			defer k.Close()
			list = k
		}
		const refill = 3 * time.Second // the pool refills (a pod takes about a second); not timed
		r.warm, err = sample(k8sRuns, true, func() error {
			time.Sleep(refill)
			var warm []string
			if cs, err := list.List(ctx); err == nil {
				for _, c := range cs {
					if c.Kind == sandbox.KindPool && c.JobID == "" {
						warm = append(warm, c.ID)
					}
				}
			}
			res, err := s.runJob(ctx, map[string]any{"command": "true"})
			if err != nil {
				return err
			}
			g, err := s.call(ctx, "get_job", map[string]any{"job_id": res["job_id"]})
			if err == nil && slices.Contains(warm, fmt.Sprint(g["container_id"])) {
				r.served++
			}
			return nil
		})
		s.close()
		if err != nil {
			return err
		}
		r.warm = r.warm.minus(refill)
		rows = append(rows, r)
	}
	fmt.Printf("\n## Kubernetes: `run_command true` through the server, %d jobs per case, same run\n\n", k8sRuns)
	fmt.Println("| backend | cold p50 | cold p95 | warm p50 | warm p95 | served warm | cold vs Docker's |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %d of %d | %.2f× |\n", r.name,
			ms(r.cold.p50()), ms(r.cold.p95()), ms(r.warm.p50()), ms(r.warm.p95()), r.served, k8sRuns+1, float64(r.cold.p50())/float64(rows[0].cold.p50()))
	}
	return nil
}
