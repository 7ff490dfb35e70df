#!/usr/bin/env bash
# Host packages that `make test` needs besides the engine, installed from
# Debian's mirror when missing:
# - sshd, for the ssh:// engine tests (each test runs its own sshd on loopback),
#   without starting or enabling a system ssh service;
# - chromium, for the console's browser tests (test/e2e TestConsoleInBrowser,
#   driven headless with chromedp).
set -euo pipefail

log() { echo "test-deps: $*" >&2; }

missing=()
[[ -x /usr/sbin/sshd ]] || missing+=(openssh-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
  log "missing ${missing[*]}: install them, or the ssh:// engine and browser tests skip (and fail under CI=true)"
  exit 0
fi
log "installing ${missing[*]} (ssh:// engine tests run their own sshd on loopback; browser tests run chromium headless)"
# Keep the packages from starting a system service (sshd on port 22) while they install.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
fi
trap '[[ $own_policy == 1 ]] && rm -f "$policy"' EXIT
apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || log "apt-get update reported problems (continuing)"
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if [[ " ${missing[*]} " == *" openssh-server "* ]] && command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
  systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
fi
