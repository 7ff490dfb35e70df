package tools

import (
	"testing"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

func TestProcessRole(t *testing.T) {
	for _, tc := range []struct {
		pid  int
		cmd  string
		want string
	}{
		{1, "/sbin/docker-init -- /usr/local/bin/sandboxer-supervisor", roleInit},
		{1, "/usr/local/bin/sandboxer-supervisor", roleSupervisor},
		{7, "/usr/local/bin/sandboxer-supervisor", roleSupervisor},
		{9, "bash -c /usr/local/bin/sandboxer-supervisor", roleJob},
		{9, "sleep 5", roleJob},
	} {
		if got := processRole(sandbox.Process{PID: tc.pid, Command: tc.cmd}); got != tc.want {
			t.Errorf("processRole(%d, %q) = %s, want %s", tc.pid, tc.cmd, got, tc.want)
		}
	}
}
