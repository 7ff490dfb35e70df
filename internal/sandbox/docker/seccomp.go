package docker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/moby/profiles/seccomp"
)

// Podman's default seccomp profile (containers-common's seccomp.json)
// allows keyctl, unshare and clone with namespace flags to every container,
// where Docker's refuses them without CAP_SYS_ADMIN: a sandbox on Podman
// could make a user namespace (the way into most kernel exploits) and use
// the kernel keyring (the hardening suite saw both). Sandboxes on Podman
// get Docker's default profile instead (github.com/moby/profiles/seccomp,
// the one Docker builds in), named by path: Podman's Docker-compatible API
// takes `seccomp=` as a file on its host, not the profile itself.

var (
	seccompOnce sync.Once
	seccompPath string
	seccompErr  error
)

// seccompDir is where the profile file is written: a directory of this
// process's user that the engine (root, or Podman's rootless user) reads.
func seccompDir() string {
	if os.Geteuid() == 0 {
		return "/run/sandboxer"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sandboxer")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sandboxer-%d", os.Geteuid()))
}

// seccompProfileFile writes Docker's default profile as JSON once, named by
// its content's hash, and returns its path.
func seccompProfileFile() (string, error) {
	seccompOnce.Do(func() {
		data, err := json.Marshal(seccomp.DefaultProfile())
		if err != nil {
			seccompErr = fmt.Errorf("seccomp profile: %w", err)
			return
		}
		sum := sha256.Sum256(data)
		dir := seccompDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			seccompErr = fmt.Errorf("seccomp profile: %w", err)
			return
		}
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
			seccompErr = fmt.Errorf("seccomp profile: %s is not a directory only its owner writes", dir)
			return
		}
		path := filepath.Join(dir, "seccomp-"+hex.EncodeToString(sum[:6])+".json")
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			seccompPath = path
			return
		}
		tmp, err := os.CreateTemp(dir, ".seccomp-*")
		if err == nil {
			_, err = tmp.Write(data)
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			if tmp != nil {
				os.Remove(tmp.Name())
			}
			seccompErr = fmt.Errorf("seccomp profile: %w", err)
			return
		}
		seccompPath = path
	})
	return seccompPath, seccompErr
}
