package server

import (
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

// NewEngine connects to the backend the policy names; onError (may be nil)
// counts failed engine calls. This is the only place that knows which
// engine it is: everything else takes the engine's declared parts
// (sandbox.Capabilities).
func NewEngine(cfg *config.Config, server string, onError func(operation string)) (sandbox.Engine, error) {
	engine, _, err := newEngine(cfg, server, onError)
	return engine, err
}

// newEngine is NewEngine that also returns the Docker runtime when that is
// the engine (nil otherwise): it alone builds the sandbox images (serve
// --build-images).
func newEngine(cfg *config.Config, server string, onError func(operation string)) (sandbox.Engine, *docker.Runtime, error) {
	switch cfg.Policy.Backend {
	case policy.BackendContainerd:
		opts := []containerd.Option{containerd.WithServer(server)}
		if onError != nil {
			opts = append(opts, containerd.WithErrorHook(onError))
		}
		engine, err := containerd.New(cfg.Instance(), containerd.Config{
			Address: cfg.Policy.Containerd.Address, Namespace: cfg.Policy.Containerd.Namespace,
		}, opts...)
		return engine, nil, err
	case policy.BackendKubernetes:
		opts := []kubernetes.Option{kubernetes.WithServer(server)}
		if onError != nil {
			opts = append(opts, kubernetes.WithErrorHook(onError))
		}
		engine, err := kubernetes.New(cfg.Instance(), kubernetes.Config{
			Kubeconfig: cfg.Policy.Kubernetes.Kubeconfig, Namespace: cfg.Policy.Kubernetes.Namespace,
			MountBytes: cfg.Policy.Kubernetes.MountMB << 20,
		}, opts...)
		return engine, nil, err
	}
	opts := []docker.Option{docker.WithServer(server)}
	if onError != nil {
		opts = append(opts, docker.WithErrorHook(onError))
	}
	rt, err := docker.New(cfg.Instance(), opts...)
	if err != nil {
		return nil, nil, err
	}
	return rt, rt, nil
}
