package main

import (
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

// engine is the runtime the policy's backend names. This file is the only
// place that knows which one it is: everything else takes the seams the
// engine implements (sandbox.WorkspaceRuntime, sandbox.VolumeRuntime,
// sandbox.ProcessInspector, sandbox.EgressRuntime, sandbox.EgressTunneler, sandbox.TunnelInstaller,
// sandbox.TunnelVolumeFiller) and answers a clear
// sentence when it implements none.
type engine interface {
	sandbox.Warmer
	// Host says where its sandboxes run (the Docker socket or URL, the
	// Kubernetes API server and namespace), for logs and doctor.
	Host() string
}

// newEngine connects to the backend the policy names; onError (may be nil)
// counts failed engine calls.
func newEngine(cfg *config.Config, server string, onError func(operation string)) (engine, error) {
	if cfg.Policy.Backend == policy.BackendKubernetes {
		opts := []kubernetes.Option{kubernetes.WithServer(server)}
		if onError != nil {
			opts = append(opts, kubernetes.WithErrorHook(onError))
		}
		return kubernetes.New(cfg.Instance(), kubernetes.Config{
			Kubeconfig: cfg.Policy.Kubernetes.Kubeconfig, Namespace: cfg.Policy.Kubernetes.Namespace,
			MountBytes: cfg.Policy.Kubernetes.MountMB << 20,
		}, opts...)
	}
	opts := []docker.Option{docker.WithServer(server)}
	if onError != nil {
		opts = append(opts, docker.WithErrorHook(onError))
	}
	return docker.New(cfg.Instance(), opts...)
}
