package remoteengine

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// SSHDPath is where Debian's openssh-server puts sshd (`make test` installs it).
const SSHDPath = "/usr/sbin/sshd"

// SSHD is an sshd of its own on a loopback port that lets its client key in
// as the current user and runs `docker system dial-stdio` against a local
// engine socket, with the client's ssh_config and known_hosts beside it.
type SSHD struct {
	Port       int
	ConfigFile string // ssh_config for SANDBOXER_SSH_CONFIG
	Dir        string
	logins     atomic.Int64 // accepted public-key logins
	cmd        *exec.Cmd
}

// Logins counts accepted public-key logins.
func (d *SSHD) Logins() int64 { return d.logins.Load() }

// Env is the server's environment for the engine behind d.
func (d *SSHD) Env() []string {
	u, _ := user.Current()
	return []string{fmt.Sprintf("DOCKER_HOST=ssh://%s@127.0.0.1:%d", u.Username, d.Port), "SANDBOXER_SSH_CONFIG=" + d.ConfigFile}
}

// TrustHostKey makes the client's known_hosts name pub (an authorized_keys
// line) as the host's key; the host's own key is in Dir/host_key.pub.
func (d *SSHD) TrustHostKey(pub []byte) error {
	return os.WriteFile(filepath.Join(d.Dir, "known_hosts"), fmt.Appendf(nil, "[127.0.0.1]:%d %s", d.Port, pub), 0o600)
}

// Keygen makes an ed25519 key pair at path and path.pub.
func Keygen(path string) error {
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sandboxer-test", "-f", path).CombinedOutput(); err != nil {
		return fmt.Errorf("ssh-keygen: %v: %s", err, out)
	}
	return nil
}

// StartSSHD runs sshd in the foreground in dir, forwarding to sock.
func StartSSHD(dir, sock string) (*SSHD, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	d := &SSHD{Dir: dir, Port: port, ConfigFile: filepath.Join(dir, "ssh_config")}
	p := func(name string) string { return filepath.Join(dir, name) }
	for _, k := range []string{"host_key", "client_key"} {
		if err := Keygen(p(k)); err != nil {
			return nil, err
		}
	}
	clientPub, err := os.ReadFile(p("client_key.pub"))
	if err != nil {
		return nil, err
	}
	hostPub, err := os.ReadFile(p("host_key.pub"))
	if err != nil {
		return nil, err
	}
	// sshd refuses to start without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, err
	}
	files := map[string]string{
		"authorized_keys": string(clientPub),
		"sshd_config": fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
SetEnv DOCKER_HOST=unix://%s
LogLevel INFO
`, port, p("host_key"), p("sshd.pid"), p("authorized_keys"), sock),
		"ssh_config": fmt.Sprintf(`Host *
  IdentityFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
`, p("client_key"), p("known_hosts")),
	}
	for name, text := range files {
		if err := os.WriteFile(p(name), []byte(text), 0o600); err != nil {
			return nil, err
		}
	}
	if err := d.TrustHostKey(hostPub); err != nil {
		return nil, err
	}
	d.cmd = exec.Command(SSHDPath, "-D", "-e", "-f", p("sshd_config"))
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sshd: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Accepted publickey") {
				d.logins.Add(1)
			}
		}
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return d, nil
		}
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("sshd never listened on 127.0.0.1:%d: %w", port, err)
		}
	}
}

// Close stops sshd.
func (d *SSHD) Close() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}
