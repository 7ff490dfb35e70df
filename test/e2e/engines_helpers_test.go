package e2e

import (
	"os"
	"testing"

	"github.com/sandboxer/sandboxer/internal/testutil/remoteengine"
)

// Helpers for the remote engine tests over internal/testutil/remoteengine:
// certificates made by the test, a TLS-terminating forwarder from loopback to
// the local engine's socket, and an sshd of the test's own.

// localEngineSocket is the unix socket of the engine the tests use.
func localEngineSocket(t *testing.T) string {
	t.Helper()
	sock := remoteengine.LocalSocket()
	if sock == "" {
		t.Skipf("DOCKER_HOST=%s is not a local socket: the remote engine tests forward to one", os.Getenv("DOCKER_HOST"))
	}
	return sock
}

func makePKI(t *testing.T) remoteengine.PKI {
	t.Helper()
	pki, err := remoteengine.MakePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return pki
}

// startTLSForwarder serves the local engine over TLS on loopback until the test ends.
func startTLSForwarder(t *testing.T, pki remoteengine.PKI) *remoteengine.TLSForwarder {
	t.Helper()
	f, err := remoteengine.StartTLS(pki, localEngineSocket(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// requireSSHD skips without sshd outside CI; `make test` installs openssh-server.
func requireSSHD(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(remoteengine.SSHDPath); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true (make test installs openssh-server)", remoteengine.SSHDPath)
	}
	t.Skipf("skipping: %s missing; `apt-get install openssh-server` (make test does)", remoteengine.SSHDPath)
}

// startSSHD serves the local engine over ssh:// on loopback until the test ends.
func startSSHD(t *testing.T) *remoteengine.SSHD {
	t.Helper()
	requireSSHD(t)
	d, err := remoteengine.StartSSHD(t.TempDir(), localEngineSocket(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}
