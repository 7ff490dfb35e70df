package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/testutil/remoteengine"
)

const (
	engineRuns = 40
	// enginePause lets the warm pool refill between calls, so every call
	// measures a warm sandbox reached through the engine's endpoint.
	enginePause = 300 * time.Millisecond
	// podmanHost is where `make test-podman` (scripts/podman.sh) serves Podman.
	podmanHost = "unix:///run/sandboxer-podman/podman.sock"
)

// engines times a warm `true` through the local socket, a TLS endpoint and an
// ssh:// endpoint to the same engine, and rootful Podman when `make
// test-podman` has set it up, each as a ratio to the local socket's p50.
func engines(ctx context.Context, o options) error {
	sock := remoteengine.LocalSocket()
	if sock == "" {
		return fmt.Errorf("DOCKER_HOST=%s is not a local socket", os.Getenv("DOCKER_HOST"))
	}
	type row struct {
		name string
		lat  stats
		note string
	}
	var rows []row
	measure := func(name string, env ...string) error {
		progress("engines: warm true x%d via %s", engineRuns, name)
		s, err := startServer(ctx, o, "engine-"+strings.Fields(name)[0], "", env...)
		if err != nil {
			return err
		}
		defer s.close()
		for i := 0; i < 3; i++ { // warm up: connections, first sandboxes
			if _, err := s.runJob(ctx, trivialJob); err != nil {
				return err
			}
		}
		var lat stats
		for i := 0; i < engineRuns; i++ {
			time.Sleep(enginePause)
			t0 := time.Now()
			if _, err := s.runJob(ctx, trivialJob); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		rows = append(rows, row{name: name, lat: lat})
		return nil
	}
	if err := measure("local socket"); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sandboxer-bench-engines-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if pki, err := remoteengine.MakePKI(dir); err != nil {
		return err
	} else if f, err := remoteengine.StartTLS(pki, sock); err != nil {
		return err
	} else {
		err := measure("tcp+tls (loopback forwarder)", f.Env()...)
		f.Close()
		if err != nil {
			return err
		}
	}
	if _, err := os.Stat(remoteengine.SSHDPath); err != nil {
		rows = append(rows, row{name: "ssh", note: "skipped: no sshd (make test installs openssh-server)"})
	} else if err := os.MkdirAll(dir+"/ssh", 0o700); err != nil {
		return err
	} else if d, err := remoteengine.StartSSHD(dir+"/ssh", sock); err != nil {
		return err
	} else {
		err := measure("ssh (loopback sshd)", d.Env()...)
		d.Close()
		if err != nil {
			return err
		}
	}
	podmanEnv := "DOCKER_HOST=" + podmanHost
	list := exec.CommandContext(ctx, o.bin, "images", "list")
	list.Env = append(os.Environ(), podmanEnv)
	if out, err := list.CombinedOutput(); err != nil || strings.Contains(string(out), "missing") {
		rows = append(rows, row{name: "podman", note: "skipped: run `make test-podman` first (it starts Podman and builds the images there)"})
	} else if err := measure("podman (rootful, compat API)", podmanEnv, "SANDBOXER_BACKEND=podman"); err != nil {
		return err
	}

	fmt.Printf("\n## Engines: warm `true` through run_command, %d calls each, %s apart\n\n", engineRuns, enginePause)
	fmt.Println("| endpoint | p50 | p95 | vs local socket |")
	fmt.Println("|---|---|---|---|")
	base := rows[0].lat.p50()
	for _, r := range rows {
		if r.note != "" {
			fmt.Printf("| %s | | | %s |\n", r.name, r.note)
			continue
		}
		fmt.Printf("| %s | %.1f ms | %.1f ms | %.2f× |\n", r.name, ms(r.lat.p50()), ms(r.lat.p95()), float64(r.lat.p50())/float64(base))
	}
	return nil
}
