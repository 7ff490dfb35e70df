#!/usr/bin/env bash
# Host packages that `make test` needs besides the engine: sshd, for the ssh://
# engine tests (each test runs its own sshd on loopback). Installed from Debian's
# mirror when missing, without starting or enabling a system ssh service.
set -euo pipefail

log() { echo "test-deps: $*" >&2; }

[[ -x /usr/sbin/sshd ]] && exit 0
if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
  log "/usr/sbin/sshd missing: install openssh-server, or the ssh:// engine tests skip (and fail under CI=true)"
  exit 0
fi
log "installing openssh-server (the ssh:// engine tests run their own sshd on loopback)"
# Keep the package from starting a system sshd on port 22 while it installs.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
fi
trap '[[ $own_policy == 1 ]] && rm -f "$policy"' EXIT
apt-get update -qq >/dev/null 2>&1 || log "apt-get update reported problems (continuing)"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
  systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
fi
