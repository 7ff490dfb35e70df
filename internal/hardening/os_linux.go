package hardening

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// OS is the running process's own kernel, as the supervisor's probe reads it.
type OS struct {
	// Self is the probe's own executable: it re-runs itself as
	// `Self probe --exit` in a new user namespace.
	Self string
}

func (OS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }
func (OS) Readlink(path string) (string, error) { return os.Readlink(path) }

func (OS) ReadDir(path string) ([]string, error) {
	es, err := os.ReadDir(path)
	names := make([]string, 0, len(es))
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names, err
}

func (OS) Stat(path string) (int, int, fs.FileMode, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fi.Mode(), nil
	}
	return int(st.Uid), int(st.Gid), fi.Mode(), nil
}

// Try makes the call. A new user namespace is asked of clone (a Go
// process has threads, and unshare refuses CLONE_NEWUSER to those).
func (o OS) Try(call string) error {
	switch call {
	case "clone-newuser":
		cmd := exec.Command(o.Self, ProbeCommand, ExitFlag)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
		err := cmd.Start()
		if err == nil {
			_ = cmd.Wait()
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	case "keyctl":
		_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
		return err
	case "mount":
		dir, err := os.MkdirTemp("", "probe-mount-")
		if err != nil {
			return fmt.Errorf("no directory to mount on: %w", err)
		}
		defer os.Remove(dir)
		err = unix.Mount("probe", dir, "tmpfs", 0, "")
		if err == nil {
			_ = unix.Unmount(dir, 0)
		}
		return err
	}
	return fmt.Errorf("unknown call %q", call)
}
