#!/usr/bin/env bash
# A containerd of its own for `backend: containerd` (make test-containerd, and for trying
# sandboxer on containerd by hand):
#   sandboxer serve --policy <a policy with backend: containerd>
# Debian's containerd and runc, with their own root, state and socket (Docker's containerd is a
# different process with a different config): installed when missing, started unless one answers
# (coping with a stale pid file). The sandbox images this checkout uses (`sandboxer images list`)
# are copied over from the Docker engine into the namespace `sandboxer` when missing there: no
# registry can be reached. Prints the socket's address.
set -euo pipefail

log() { echo "containerd: $*" >&2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
dir=/run/sandboxer-containerd
sock=$dir/containerd.sock
data=/var/lib/sandboxer-containerd
ns=${SANDBOXER_CONTAINERD_NAMESPACE:-sandboxer}
ctrc() { ctr -a "$sock" -n "$ns" "$@"; }
answers() { timeout 10 ctr -a "$sock" version >/dev/null 2>&1; }

if ! command -v containerd >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
    log "containerd (with runc) is missing: install it, or run this as root on Debian"
    exit 1
  fi
  log "installing containerd and runc from Debian's packages"
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || log "apt-get update reported problems (continuing)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends containerd runc >/dev/null
fi

mkdir -p "$dir" "$data"
cat >"$dir/config.toml" <<EOF
# containerd for sandboxer's backend: containerd only (scripts/containerd.sh).
version = 2
root = "$data"
state = "$dir/state"
# Only what the runtime uses: no CRI, no other snapshotters.
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$sock"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$data/opt"
EOF

if ! answers; then
  pidfile=$dir/containerd.pid
  if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [[ -n $pid && -r /proc/$pid/comm && $(cat /proc/$pid/comm) == containerd ]]; then
      kill "$pid" 2>/dev/null || true # alive but not answering
      sleep 1
    fi
    rm -f "$pidfile"
  fi
  rm -f "$sock"
  log "starting containerd on $sock (log: /var/log/sandboxer-containerd.log)"
  # Its descriptors closed: a daemon started under make's pipes would hold them.
  setsid nohup containerd --config "$dir/config.toml" >>/var/log/sandboxer-containerd.log 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 60); do answers && break; sleep 0.5; done
  answers || { log "containerd did not answer within 30 s:"; tail -n 20 /var/log/sandboxer-containerd.log >&2; exit 1; }
fi

# The final images this checkout's server uses, each copied once (by its Docker image id).
if docker version >/dev/null 2>&1 && [[ -x $ROOT/bin/sandboxer ]]; then
  have=$(ctrc images ls -q 2>/dev/null || true)
  n=0
  while read -r _ ref; do
    [[ -n $ref ]] || continue
    grep -qxF "docker.io/$ref" <<<"$have" && continue
    docker image inspect "$ref" >/dev/null 2>&1 || continue
    log "importing $ref"
    docker save "$ref" | ctrc images import - >/dev/null
    n=$((n + 1))
  done < <("$ROOT/bin/sandboxer" images list 2>/dev/null | awk '$2 ~ /^sandboxer\// {print $1, $2}')
  [[ $n -eq 0 ]] || log "imported $n images from the Docker engine"
else
  log "no Docker engine (or no bin/sandboxer): sandbox images not imported (make images, then this again)"
fi
log "containerd $(ctr -a "$sock" version 2>/dev/null | awk '/Version/ {print $2; exit}') answers on $sock"
echo "$sock"
