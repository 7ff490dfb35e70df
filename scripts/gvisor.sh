#!/usr/bin/env bash
# Opt-in: build current gVisor (runsc) from the Go module proxy, not Debian's
# 2022 package, install it as /usr/local/lib/sandboxer/runsc and register it
# with the running dockerd as runtime "runsc", with runsc's --network=none,
# --oci-seccomp (the engine's seccomp profile applied inside the sandbox
# too: without it runsc drops it, and a job may make a user namespace or
# use the keyring inside gVisor) and the KVM platform where /dev/kvm works (systrap elsewhere; it says
# which). Merges into /etc/docker/daemon.json (never clobbers other keys or
# runtimes) and reloads the daemon with SIGHUP (runtimes are
# live-reloadable). It also turns on the engine's experimental mode, which
# serves checkpoints (hibernation and forks with processes): that needs one
# restart of dockerd, the first time only; no second dockerd is ever
# started. Then runs a tiny container under runsc to prove it works.
# Policy: `runtime: runsc` (a policy naming a runtime the engine lacks stops
# the server at load: it never falls back to another).
set -euo pipefail

# The gVisor commit the module proxy serves (its "go" branch, buildable with
# the go command); SANDBOXER_GVISOR_VERSION picks another.
GVISOR_VERSION=${SANDBOXER_GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
DEST=/usr/local/lib/sandboxer
log() { echo "gvisor: $*" >&2; }
CONF=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
export PATH=$PATH:/usr/local/go/bin

if [[ -n "${DOCKER_HOST:-}" ]]; then
  log "DOCKER_HOST=$DOCKER_HOST is a remote engine: install runsc on that host and register it there"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  log "this script installs runsc as root; elsewhere see https://gvisor.dev/docs/user_guide/install/"
  exit 1
fi

# The version it reports: the commit's date and hash, as the proxy names it.
want="go-${GVISOR_VERSION#v0.0.0-}"
have=$("$DEST/runsc" --version 2>/dev/null | sed -n 's/^runsc version //p' || true)
if [[ $have != "$want" ]]; then
  log "building runsc $want from the Go module proxy (a few minutes the first time)"
  mkdir -p "$DEST"
  tmp=$(mktemp -d)
  GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-mod=mod go install \
    -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$want" "gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
  install -m 0755 "$tmp/runsc" "$DEST/runsc"
  rm -rf "$tmp"
fi
RUNSC=$DEST/runsc
log "$("$RUNSC" --version 2>/dev/null | head -1) at $RUNSC"

# KVM where the host gives it and runsc runs a program on it (a hardware
# boundary under the Sentry, and faster system calls); systrap (seccomp
# traps, no hardware help) elsewhere. /dev/kvm can open and still not run
# a guest (nested virtualisation): runsc then hangs, so it is tried once
# with a deadline, never assumed.
platform=systrap why="no usable /dev/kvm"
if [[ -c /dev/kvm ]] && python3 -c 'import os; os.close(os.open("/dev/kvm", os.O_RDWR))' 2>/dev/null; then
  probe_root=$(mktemp -d)
  if out=$(timeout 20 "$RUNSC" --root="$probe_root" --platform=kvm --network=none do echo kvm-ok 2>&1) && [[ $out == *kvm-ok* ]]; then
    platform=kvm why=""
  else
    why="/dev/kvm opens, but runsc's KVM platform did not run a program within 20 s"
    pkill -f -- "--root=$probe_root" 2>/dev/null || true
  fi
  rm -rf "$probe_root" 2>/dev/null || true
fi
log "platform $platform${why:+ ($why)}"

# Merge the runtime into daemon.json (keeping everything else) with python3,
# writing a new file and renaming it over the old one.
mkdir -p "$(dirname "$CONF")"
python3 - "$CONF" "$RUNSC" "$platform" <<'PY'
import json, os, sys
conf, runsc, platform = sys.argv[1:4]
data = {}
if os.path.exists(conf) and os.path.getsize(conf) > 0:
    with open(conf) as f:
        data = json.load(f)  # a broken file stops here, untouched
want = {"path": runsc, "runtimeArgs": ["--network=none", "--oci-seccomp", "--platform=" + platform]}
runtimes = data.setdefault("runtimes", {})
if runtimes.get("runsc") == want and data.get("experimental") is True:
    sys.exit(0)
runtimes["runsc"] = want
# Checkpoints (workspaces.hibernate_after_s, forks with processes) are served
# by the Engine API in experimental mode only.
data["experimental"] = True
tmp = conf + ".sandboxer-tmp"
with open(tmp, "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
os.replace(tmp, conf)
print("gvisor: registered runsc in " + conf, file=sys.stderr)
PY

# dockerd reads runtimes on SIGHUP; wait until it lists this path and these
# arguments (a re-registration changes them in place).
registered() {
  docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
rt = json.load(sys.stdin).get("runsc") or {}
args = rt.get("runtimeArgs") or []
sys.exit(0 if rt.get("path") == sys.argv[1] and "--platform=" + sys.argv[2] in args and "--oci-seccomp" in args else 1)' "$RUNSC" "$platform"
}
if ! registered; then
  pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd || true)
  if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
    log "no running dockerd found: start it (make engine) and run this again"
    exit 1
  fi
  log "reloading dockerd (pid $pid) with SIGHUP"
  kill -HUP "$pid"
  for _ in $(seq 1 20); do registered && break; sleep 0.5; done
  registered || { log "dockerd did not pick up the runtime; see /var/log/dockerd.log"; exit 1; }
fi
log "dockerd lists runtime runsc ($RUNSC, platform $platform)"

# A reload does not change experimental mode: restart dockerd once for it
# (its containers stop; sandboxer's are made again on demand).
if [[ $(docker version --format '{{.Server.Experimental}}' 2>/dev/null) != true ]]; then
  log "restarting dockerd: gVisor's checkpoints need its experimental mode, which a reload does not turn on"
  pkill -TERM -x dockerd || true
  for _ in $(seq 1 30); do pgrep -x dockerd >/dev/null || break; sleep 1; done
  bash "$(dirname "$0")/engine.sh"
  [[ $(docker version --format '{{.Server.Experimental}}' 2>/dev/null) == true ]] || { log "dockerd runs without experimental mode; see /var/log/dockerd.log"; exit 1; }
fi

# Prove it: a container under runsc sees gVisor's kernel.
img=$(docker images --format '{{.Repository}}:{{.Tag}}' 'sandboxer/base' | head -1)
img=${img:-debian:bookworm-slim}
if out=$(timeout 60 docker run --rm --runtime=runsc --network=none "$img" cat /proc/version 2>&1) && grep -qi gvisor <<<"$out"; then
  log "a container under runsc runs ($(head -1 <<<"$out"))"
else
  log "a container under runsc failed: $out"
  exit 1
fi
