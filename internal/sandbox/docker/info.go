package docker

import (
	"context"
	"sort"
	"strings"

	"github.com/moby/moby/api/types/system"

	"github.com/moby/moby/client"
)

// EngineInfo is what doctor reports about the engine.
type EngineInfo struct {
	Host          string
	Endpoint      Endpoint
	Product       string // "Docker" or "Podman" (Podman's Docker-compatible API)
	ServerVersion string
	APIVersion    string // negotiated
	MaxAPIVersion string // the engine's highest
	CgroupVersion string
	CgroupDriver  string
	StorageDriver string
	Runtimes      []string
	DefaultRT     string
	// RuntimePaths are the engine's runtimes' binaries, on the engine's host.
	RuntimePaths map[string]string
	// RuntimeArgs are the arguments the engine passes each runtime
	// (runsc's --platform, --oci-seccomp).
	RuntimeArgs map[string][]string
	// RuncVersion is the version of the engine's own runc, as the engine
	// reports it ("" when it does not), and RuncPackage the distribution's
	// package of it where the engine names one (Debian's "1.1.5+ds1-1+deb12u1").
	RuncVersion, RuncPackage string
	NCPU                     int
	MemTotal                 int64
	// Unenforced says why the engine cannot hold sandbox limits ("" when it can).
	Unenforced string
}

// EngineInfo asks the engine about itself.
func (r *Runtime) EngineInfo(ctx context.Context) (EngineInfo, error) {
	if err := r.Ping(ctx); err != nil {
		return EngineInfo{Host: r.Host(), Endpoint: r.endpoint}, err
	}
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return EngineInfo{Host: r.Host(), Endpoint: r.endpoint}, r.engineErr(err)
	}
	ver, err := r.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return EngineInfo{Host: r.Host(), Endpoint: r.endpoint}, r.engineErr(err)
	}
	i := info.Info
	var runtimes []string
	paths, args := map[string]string{}, map[string][]string{}
	for name, rt := range i.Runtimes {
		runtimes = append(runtimes, name)
		paths[name], args[name] = rt.Path, rt.Args
	}
	runc, runcPkg := "", ""
	for _, c := range ver.Components {
		if c.Name == "runc" {
			runc, runcPkg = c.Version, c.Details["GitCommit"]
		}
	}
	sort.Strings(runtimes)
	return EngineInfo{
		Host: r.Host(), Endpoint: r.endpoint, Product: product(ver.Components), ServerVersion: i.ServerVersion, APIVersion: r.cli.ClientVersion(), MaxAPIVersion: ver.APIVersion,
		CgroupVersion: i.CgroupVersion, CgroupDriver: i.CgroupDriver, StorageDriver: i.Driver,
		Runtimes: runtimes, DefaultRT: i.DefaultRuntime, RuntimePaths: paths, RuntimeArgs: args, RuncVersion: runc, RuncPackage: runcPkg, NCPU: i.NCPU, MemTotal: i.MemTotal,
		Unenforced: limitsUnenforced(i.CgroupVersion, i.SecurityOptions, r.podmanRootless(ctx)),
	}, nil
}

// product tells Podman's Docker-compatible service from Docker: Podman names
// itself among the version's components.
func product(components []system.ComponentVersion) string {
	for _, c := range components {
		if strings.Contains(strings.ToLower(c.Name), "podman") {
			return "Podman"
		}
	}
	return "Docker"
}
