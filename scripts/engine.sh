#!/usr/bin/env bash
# Make sure a Docker engine answers. On a Debian host where we are root and none
# answers, install docker.io and start dockerd in the background; otherwise say
# exactly what the user must do. Copes with stale pid files of a killed daemon.
set -euo pipefail

log() { echo "engine: $*" >&2; }

engine_answers() {
  # DOCKER_HOST is honoured by the client; a plain `docker version` checks the server answers.
  timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# stale_running: the engine lists a container as running whose process is
# gone. Seen here after every containerd shim died at once: dockerd ignored
# their end, and each removal (and every create after it) then waited forever.
stale_running() {
  local ids id pid
  ids=$(timeout -s KILL 20 docker ps -q 2>/dev/null) || return 1
  [[ -n $ids ]] || return 1
  # One inspect for them all; a container gone meanwhile just drops out.
  while read -r id pid; do
    if [[ $pid -gt 0 && ! -d /proc/$pid ]]; then
      log "container $id is listed as running, but its process $pid is gone"
      return 0
    fi
  done < <(timeout -s KILL 20 docker inspect -f '{{.Id}} {{.State.Pid}}' $ids 2>/dev/null || true)
  return 1
}

# wedged: the engine answers but does not run a container within a minute.
# Seen here: Docker 20.10's libnetwork deadlock between one container's
# network teardown and another's endpoint removal (moby/moby#42545; Debian
# bookworm's 20.10.24 lacks the fix) when many containers come and go. Every
# start, stop and removal then waits forever, while `docker version` and
# `docker ps` still answer. Only a timeout counts: a probe that fails fast
# failed for another reason, which the steps after this one report.
wedged() {
  local img=debian:bookworm-slim rc=0
  timeout -s KILL 10 docker image inspect "$img" >/dev/null 2>&1 || return 1 # nothing to run yet
  timeout -s KILL 20 docker rm -f sandboxer-engine-probe >/dev/null 2>&1 || true
  timeout -s KILL 60 docker run --rm --name sandboxer-engine-probe --network none "$img" true >/dev/null 2>&1 || rc=$?
  if [[ $rc -eq 137 ]]; then
    log "a probe container ($img true) did not run within 60 s"
    return 0
  fi
  return 1
}

# A daemon this script may restart: the local one, as root on Debian.
own_daemon() { [[ -z ${DOCKER_HOST:-} && $(id -u) -eq 0 && -f /etc/debian_version ]] && pgrep -x dockerd >/dev/null; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
  if own_daemon && { stale_running || wedged; }; then
    log "restarting dockerd: it is stuck"
    pkill -TERM -x dockerd || true
    for _ in $(seq 1 20); do pgrep -x dockerd >/dev/null || break; sleep 1; done
    if pgrep -x dockerd >/dev/null; then
      pkill -KILL -x dockerd || true
      pkill -KILL -f 'containerd --config /var/run/docker/containerd/' || true
      sleep 1
    fi
  else
    log "Docker engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    bash "$(dirname "$0")/runc.sh" || log "could not put a patched runc under the sandboxes: \`sandboxer doctor\` names the escapes"
    exit 0
  fi
fi

if [[ -n "${DOCKER_HOST:-}" ]]; then
  log "DOCKER_HOST=$DOCKER_HOST does not answer: start that engine or unset DOCKER_HOST"
  exit 1
fi

if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
  log "no Docker engine answers. Install Docker Engine and start it (e.g. 'sudo systemctl start docker'),"
  log "or set DOCKER_HOST to a running engine; this script only installs one on Debian as root."
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io from Debian's packages"
  # Extra third-party apt sources may be unreachable; Debian's own mirror is what matters.
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || log "apt-get update reported problems (continuing)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    docker.io iptables ca-certificates >/dev/null
fi
# A client from outside Debian's package may sit earlier on PATH; any client of API >= 1.41 works.
command -v docker >/dev/null 2>&1 || { log "docker client missing after install"; exit 1; }

# running NAME PID: PID is a live (not zombie) process called NAME. A pid file
# left by a killed daemon may name a zombie or, after a reboot, some other process.
running() {
  local name=$1 pid=$2
  [[ -n $pid && -r /proc/$pid/stat ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

live_dockerd() {
  local pid
  for pid in $(pgrep -x dockerd || true); do
    if running dockerd "$pid"; then echo "$pid"; return 0; fi
  done
  return 1
}

# Stale state from a daemon that was killed: pid files whose process is gone block a new start.
for entry in dockerd:/var/run/docker.pid containerd:/run/docker/containerd/containerd.pid containerd:/var/run/docker/containerd/containerd.pid; do
  name=${entry%%:*} pidfile=${entry#*:}
  if [[ -f $pidfile ]] && ! running "$name" "$(cat "$pidfile" 2>/dev/null || true)"; then
    log "removing stale pid file $pidfile"
    rm -f "$pidfile"
  fi
done

if ! live_dockerd >/dev/null; then
  rm -f /var/run/docker.sock
  mkdir -p /var/log
  log "starting dockerd (log: /var/log/dockerd.log)"
  # setsid: the daemon must outlive this script and the make that called it,
  # holding none of their descriptors (a make -j job pipe, a lock) open.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-"; fi
    done
    exec setsid nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null
  ) &
fi

for _ in $(seq 1 60); do
  if engine_answers; then
    log "Docker engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    # A runc with known escapes is not left under the sandboxes (scripts/runc.sh).
    bash "$(dirname "$0")/runc.sh" || log "could not put a patched runc under the sandboxes: \`sandboxer doctor\` names the escapes"
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; see the end of /var/log/dockerd.log:"
tail -n 20 /var/log/dockerd.log >&2 || true
exit 1
