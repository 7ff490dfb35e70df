package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/testutil"
	"github.com/sandboxer/sandboxer/internal/testutil/remoteengine"
)

// The server against an ssh:// engine: an sshd of the test's own on loopback
// (host and client keys made by the test, its own known_hosts), which runs
// `docker system dial-stdio` against the local engine for every connection.

func TestSSHEngineCore(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	d := startSSHD(t)
	engineCore(t, d.Env()...)
	if d.Logins() == 0 {
		t.Fatal("sshd accepted no login: the server did not use the ssh:// endpoint")
	}
}

func TestSSHEngineRestartAdoption(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	d := startSSHD(t)
	engineAdoption(t, d.Env()...)
	if d.Logins() == 0 {
		t.Fatal("sshd accepted no login")
	}
}

// doctor over ssh names the endpoint and says it is remote; a host whose key
// is not the known one is refused (ssh's StrictHostKeyChecking, never a prompt).
func TestSSHEngineDoctor(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	d := startSSHD(t)
	env := d.Env()
	out, err := runBin(t, env, "doctor", "--state-dir", t.TempDir())
	if err != nil || !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d, remote over ssh", d.Port)) || !strings.Contains(out, "all checks passed") {
		t.Fatalf("doctor over ssh: %v\n%s", err, out)
	}

	// Another host key in known_hosts: the engine is not trusted.
	other := filepath.Join(t.TempDir(), "other_key")
	if err := remoteengine.Keygen(other); err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(other + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	before := d.Logins()
	if err := d.TrustHostKey(pub); err != nil {
		t.Fatal(err)
	}
	out, err = runBin(t, env, "doctor", "--state-dir", t.TempDir())
	if err == nil || !strings.Contains(out, "FAIL") || !strings.Contains(strings.ToLower(out), "host key") {
		t.Fatalf("an engine host with an unknown key was accepted: %v\n%s", err, out)
	}
	if d.Logins() != before {
		t.Fatal("a login went through to a host whose key did not match")
	}
}
