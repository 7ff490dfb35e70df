// Package serverlock gives each server process an identity in a state
// directory that other processes can probe: a lock file held with flock for
// as long as the process lives. The kernel drops the lock when the process
// dies (even by SIGKILL), so "is server X still running?" is answered by
// trying to take X's lock — no pid files, no clocks, no heartbeats.
//
// Several servers share one state directory (every stdio client starts its
// own). Each adopts, sweeps or kills only what belongs to servers whose lock
// is free.
package serverlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// dirName is the folder under the state directory that holds the lock files.
const dirName = "servers"

// validID is what Acquire makes; anything else is never turned into a path.
var validID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Lock is this process's identity, held until Release or exit.
type Lock struct {
	id   string
	dir  string
	file *os.File
}

// Acquire creates a fresh identity under stateDir and holds its lock.
func Acquire(stateDir string) (*Lock, error) {
	dir := filepath.Join(stateDir, dirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server lock directory: %w", err)
	}
	id := uuid.NewString()
	f, err := os.OpenFile(filepath.Join(dir, id+".lock"), os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("server lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("server lock: %w", err)
	}
	// For people reading the directory; the lock, not this text, is what counts.
	fmt.Fprintf(f, "pid %d\nstarted %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	return &Lock{id: id, dir: dir, file: f}, nil
}

// ID is this server's identity.
func (l *Lock) ID() string { return l.id }

// Release drops the lock and removes its file; idempotent.
func (l *Lock) Release() {
	if l == nil || l.file == nil {
		return
	}
	os.Remove(l.file.Name())
	l.file.Close()
	l.file = nil
}

// Prober answers whether a server of one state directory is alive.
type Prober struct{ dir string }

// NewProber probes the servers of stateDir.
func NewProber(stateDir string) Prober { return Prober{dir: filepath.Join(stateDir, dirName)} }

// Alive says whether the server with this identity still holds its lock. An
// unknown or malformed identity (including "", which records written before
// identities existed carry) is not alive.
func (p Prober) Alive(id string) bool {
	if !validID.MatchString(id) {
		return false
	}
	f, err := os.OpenFile(filepath.Join(p.dir, id+".lock"), os.O_RDWR, 0)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) // unreadable: assume alive, never steal
	}
	defer f.Close()
	// flock locks belong to the open file description, so this fails while
	// the owner (even in this same process) holds it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// Forget removes the lock file of a server that is gone, once nothing refers
// to it any more; a live server's file is left alone.
func (p Prober) Forget(id string) {
	if validID.MatchString(id) && !p.Alive(id) {
		os.Remove(filepath.Join(p.dir, id+".lock"))
	}
}

// Stale lists the identities whose lock files remain but whose servers are gone.
func (p Prober) Stale() []string {
	entries, _ := os.ReadDir(p.dir)
	var ids []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".lock")
		if ok && validID.MatchString(id) && !p.Alive(id) {
			ids = append(ids, id)
		}
	}
	return ids
}
