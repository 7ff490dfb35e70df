#!/usr/bin/env bash
# A rootful Podman serving its Docker-compatible API on its own socket, for
# `make test-podman` (and for trying sandboxer on Podman by hand):
#   DOCKER_HOST=unix:///run/sandboxer-podman/podman.sock sandboxer serve
# Installs podman and catatonit (Podman's --init) from Debian when missing,
# starts `podman system service` unless one answers (coping with a stale pid
# file), and copies debian:bookworm-slim over from the Docker engine when
# Podman lacks it (no registry can be reached). Prints the DOCKER_HOST.
set -euo pipefail
# With the argument `rootless`: the same service run by an unprivileged user
# (sandboxer-podman, made when missing) on /run/sandboxer-podman-rootless/.

log() { echo "podman: $*" >&2; }
mode=${1:-rootful}

dir=/run/sandboxer-podman
sock=$dir/podman.sock
host=unix://$sock

if ! command -v podman >/dev/null 2>&1 || [[ ! -x /usr/libexec/podman/catatonit && ! -x /usr/bin/catatonit ]]; then
  if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
    log "podman (with catatonit) is missing: install it, or run this as root on Debian"
    exit 1
  fi
  log "installing podman and catatonit from Debian's packages"
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || log "apt-get update reported problems (continuing)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends podman catatonit >/dev/null
fi

mkdir -p "$dir"

if [[ $mode == rootless ]]; then
  user=sandboxer-podman
  id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
  grep -q "^$user:" /etc/subuid || usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$user"
  rdir=/run/sandboxer-podman-rootless
  rsock=$rdir/podman.sock
  mkdir -p "$rdir" "/run/user/$(id -u "$user")"
  chown "$user" "$rdir" "/run/user/$(id -u "$user")"
  if ! timeout 10 env DOCKER_HOST="unix://$rsock" docker version >/dev/null 2>&1; then
    pkill -u "$user" -f "podman system service" 2>/dev/null || true
    rm -f "$rsock"
    log "starting rootless podman system service as $user on $rsock"
    su -s /bin/bash "$user" -c "XDG_RUNTIME_DIR=/run/user/$(id -u "$user") setsid nohup podman system service --time=0 unix://$rsock >>/tmp/sandboxer-podman-rootless.log 2>&1 </dev/null &"
    for _ in $(seq 1 60); do timeout 10 env DOCKER_HOST="unix://$rsock" docker version >/dev/null 2>&1 && break; sleep 1; done
  fi
  echo "unix://$rsock"
  exit 0
fi

answers() { timeout 10 env DOCKER_HOST="$host" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# The patched runc (scripts/runc.sh) as Podman's runtime "sandboxer-runc",
# in a drop-in of its own: sandboxes run on it, Podman's other containers
# keep its default. A service already running reads it when restarted.
runc_conf=/etc/containers/containers.conf.d/50-sandboxer-runc.conf
if [[ -x /usr/local/lib/sandboxer/runc ]]; then
  want=$'[engine.runtimes]\nsandboxer-runc = ["/usr/local/lib/sandboxer/runc"]'
  if [[ "$(cat "$runc_conf" 2>/dev/null)" != "$want" ]]; then
    mkdir -p "$(dirname "$runc_conf")"
    printf '%s\n' "$want" > "$runc_conf"
    log "registered the patched runc as Podman's runtime sandboxer-runc ($runc_conf)"
    if answers; then
      pkill -f "podman system service --time=0 $host" 2>/dev/null || true
      sleep 1
    fi
  fi
fi

if ! answers; then
  pidfile=$dir/service.pid
  if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [[ -n $pid && -r /proc/$pid/comm && $(cat /proc/$pid/comm) == podman ]]; then
      kill "$pid" 2>/dev/null || true # alive but not answering
      sleep 1
    fi
    rm -f "$pidfile"
  fi
  rm -f "$sock"
  log "starting podman system service on $sock (log: /var/log/sandboxer-podman.log)"
  # Podman's Docker-compatible API ignores a container's HostConfig.Runtime:
  # this service (its own socket) runs everything on the patched runc when
  # the setup built one; other uses of Podman keep its default.
  runtime_flag=()
  [[ -f $runc_conf ]] && runtime_flag=(--runtime sandboxer-runc)
  setsid nohup podman "${runtime_flag[@]}" system service --time=0 "$host" \
    >>/var/log/sandboxer-podman.log 2>&1 </dev/null &
  echo $! > "$pidfile"
  for _ in $(seq 1 60); do answers && break; sleep 1; done
  answers || { log "podman did not answer within 60 s:"; tail -n 20 /var/log/sandboxer-podman.log >&2; exit 1; }
fi

if ! podman image exists debian:bookworm-slim; then
  log "copying debian:bookworm-slim from the Docker engine"
  docker save debian:bookworm-slim | podman load -q >/dev/null
fi
log "Podman $(podman version --format '{{.Server.Version}}' 2>/dev/null || podman version --format '{{.Version}}') answers on $host"
echo "$host"
