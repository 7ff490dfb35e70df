package serverlock

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestAliveWhileHeldAndAfterRelease(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := NewProber(dir)
	if !p.Alive(a.ID()) || !p.Alive(b.ID()) {
		t.Fatal("held locks must probe alive, also from the same process")
	}
	a.Release()
	a.Release() // idempotent
	if p.Alive(a.ID()) {
		t.Fatal("released lock still alive")
	}
	if !p.Alive(b.ID()) {
		t.Fatal("releasing a must not affect b")
	}
	for _, id := range []string{"", "../../etc/passwd", "nope", "00000000-0000-0000-0000-000000000000"} {
		if p.Alive(id) {
			t.Errorf("Alive(%q) = true", id)
		}
	}
}

// A process that dies without releasing (SIGKILL) leaves its file, and the
// kernel frees its lock: it probes dead, Stale lists it, Forget removes it.
func TestKilledHolderIsDead(t *testing.T) {
	if os.Getenv("SERVERLOCK_CHILD") != "" {
		l, err := Acquire(os.Getenv("SERVERLOCK_CHILD"))
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(l.ID() + "\n")
		time.Sleep(time.Minute)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledHolderIsDead$")
	cmd.Env = append(os.Environ(), "SERVERLOCK_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 37)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	id := string(buf[:36])
	p := NewProber(dir)
	if !p.Alive(id) {
		t.Fatal("child's lock not alive")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if p.Alive(id) {
		t.Fatal("killed child's lock still alive")
	}
	if st := p.Stale(); len(st) != 1 || st[0] != id {
		t.Fatalf("Stale = %v", st)
	}
	p.Forget(id)
	if _, err := os.Stat(filepath.Join(dir, dirName, id+".lock")); !os.IsNotExist(err) {
		t.Fatal("Forget left the file")
	}
}
