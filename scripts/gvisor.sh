#!/usr/bin/env bash
# Opt-in: install gVisor (Debian's runsc package) and register it with the
# running dockerd as runtime "runsc", with runsc's --network=none. Merges into
# /etc/docker/daemon.json (never clobbers other keys or runtimes) and reloads
# the daemon with SIGHUP (runtimes are live-reloadable): the engine is never
# restarted and no second dockerd is started. Then runs a tiny container under
# runsc to prove it works. Policy: `runtime: runsc`.
set -euo pipefail

log() { echo "gvisor: $*" >&2; }
CONF=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}

if [[ -n "${DOCKER_HOST:-}" ]]; then
  log "DOCKER_HOST=$DOCKER_HOST is a remote engine: install runsc on that host and register it there"
  exit 1
fi
if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
  log "this script installs runsc on Debian as root; elsewhere see https://gvisor.dev/docs/user_guide/install/"
  exit 1
fi

if ! command -v runsc >/dev/null 2>&1; then
  log "installing runsc from Debian's packages"
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || log "apt-get update reported problems (continuing)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends runsc >/dev/null
fi
RUNSC=$(command -v runsc)
log "$("$RUNSC" --version 2>/dev/null | head -1)"

# Merge the runtime into daemon.json (keeping everything else) with python3,
# writing a new file and renaming it over the old one.
mkdir -p "$(dirname "$CONF")"
python3 - "$CONF" "$RUNSC" <<'PY'
import json, os, sys
conf, runsc = sys.argv[1], sys.argv[2]
data = {}
if os.path.exists(conf) and os.path.getsize(conf) > 0:
    with open(conf) as f:
        data = json.load(f)  # a broken file stops here, untouched
want = {"path": runsc, "runtimeArgs": ["--network=none"]}
runtimes = data.setdefault("runtimes", {})
if runtimes.get("runsc") == want:
    sys.exit(0)
runtimes["runsc"] = want
tmp = conf + ".sandboxer-tmp"
with open(tmp, "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
os.replace(tmp, conf)
print("gvisor: registered runsc in " + conf, file=sys.stderr)
PY

has_runsc() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
if ! has_runsc; then
  pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd || true)
  if [[ -z $pid ]]; then
    log "no running dockerd found: start it (make engine) and run this again"
    exit 1
  fi
  log "reloading dockerd (pid $pid) with SIGHUP"
  kill -HUP "$pid"
  for _ in $(seq 1 20); do has_runsc && break; sleep 0.5; done
  has_runsc || { log "dockerd did not pick up the runtime; see /var/log/dockerd.log"; exit 1; }
fi
log "dockerd lists runtime runsc"

# Prove it: a container under runsc sees gVisor's kernel.
img=$(docker images --format '{{.Repository}}:{{.Tag}}' 'sandboxer/base' | head -1)
img=${img:-debian:bookworm-slim}
if out=$(timeout 60 docker run --rm --runtime=runsc --network=none "$img" dmesg 2>&1) && grep -qi gvisor <<<"$out"; then
  log "a container under runsc runs ($(head -1 <<<"$out"))"
else
  log "a container under runsc failed: $out"
  exit 1
fi
