package sandbox

import (
	"strings"
	"testing"
)

func TestParsePs(t *testing.T) {
	out := `      1       0 sandbox           0.0   996      12 /sbin/docker-init -- /usr/local/bin/sandboxer-supervisor
      7       1 sandbox           0.1  5120      12 /usr/local/bin/sandboxer-supervisor
      9       7 sandbox          12.5  3300       3 bash -c sleep 100 & wait
     31       0 sandbox           0.0  3000       0 ` + strings.Join(PsCommand, " ") + `
garbage line
`
	ps := ParsePs(out)
	if len(ps) != 3 {
		t.Fatalf("got %d processes: %+v", len(ps), ps)
	}
	p := ps[2]
	if p.PID != 9 || p.PPID != 7 || p.User != "sandbox" || p.CPUPercent != 12.5 || p.RSSBytes != 3300*1024 || p.ElapsedS != 3 || p.Command != "bash -c sleep 100 & wait" {
		t.Fatalf("parsed %+v", p)
	}
}

func TestKillCommand(t *testing.T) {
	if argv, err := KillCommand(9, "TERM"); err != nil || strings.Join(argv, " ") != "kill -s TERM 9" {
		t.Fatalf("KillCommand(9, TERM) = %q, %v", argv, err)
	}
	if _, err := KillCommand(0, "TERM"); err != ErrNoSuchProcess {
		t.Fatalf("pid 0: %v", err)
	}
	if _, err := KillCommand(9, "SEGV"); err == nil || !strings.Contains(err.Error(), `"SEGV"`) {
		t.Fatalf("SEGV: %v", err)
	}
}
