// Command pause is the pod sandbox's process for scripts/k8s-cluster.sh: the
// cluster has no registry, so its pause image is this static binary alone.
// It waits for SIGTERM or SIGINT and reaps any child it inherits as PID 1.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
