#!/usr/bin/env bash
# A patched runc under the sandboxes. When the local dockerd's runc has a
# known container escape (the table in internal/backend/escapes.go; Debian
# bookworm ships runc 1.1.5, with CVE-2024-21626 and the three of
# November 2025), build a current runc from the Go module proxy (cgo, with
# Debian's libseccomp-dev), install it as /usr/local/lib/sandboxer/runc and
# register it with dockerd as runtime "sandboxer-runc" (merged into
# /etc/docker/daemon.json, reloaded with SIGHUP: the engine is not
# restarted). Sandboxes whose policy names no runtime run on it; the
# engine's other containers keep its default. `sandboxer doctor` reports
# the version each uses.
set -euo pipefail

RUNC_VERSION=${SANDBOXER_RUNC_VERSION:-v1.5.3}
DEST=/usr/local/lib/sandboxer
CONF=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
NAME=sandboxer-runc
log() { echo "runc: $*" >&2; }
export PATH=$PATH:/usr/local/go/bin

if [[ -n "${DOCKER_HOST:-}" || $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
  log "not a local Debian engine run as root: name a patched runtime in the policy's runtime key instead"
  exit 0
fi

engine_runc=$(docker version --format '{{range .Server.Components}}{{if eq .Name "runc"}}{{.Version}}{{end}}{{end}}' 2>/dev/null || true)
# Mirrors internal/backend's table: affected below 1.2.8 on 1.2 and older
# lines, below 1.3.3 on 1.3, and 1.4's release candidates before rc.3.
affected() {
  python3 - "$1" <<'PY'
import re, sys
m = re.match(r'v?(\d+)\.(\d+)\.(\d+)(?:-rc\.?(\d+))?', sys.argv[1] or "")
if not m: sys.exit(0)  # unknown: treat as affected
a, b, c = int(m[1]), int(m[2]), int(m[3]); rc = m[4]
if (a, b) < (1, 2) or (a, b) == (1, 2) and c < 8 or (a, b) == (1, 3) and c < 3: sys.exit(0)
if (a, b, c) == (1, 4, 0) and rc is not None and int(rc) < 3: sys.exit(0)
sys.exit(1)
PY
}
if ! affected "$engine_runc"; then
  log "the engine's runc ${engine_runc} has no known escape: nothing to do"
  exit 0
fi

want=${RUNC_VERSION#v}
have=$("$DEST/runc" --version 2>/dev/null | sed -n 's/^runc version //p' || true)
if [[ $have != "$want" ]]; then
  log "the engine's runc ${engine_runc:-?} has known escapes: building runc $RUNC_VERSION from the Go module proxy"
  if ! dpkg -s libseccomp-dev gcc >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends libseccomp-dev gcc libc6-dev >/dev/null
  fi
  mkdir -p "$DEST"
  tmp=$(mktemp -d)
  GOBIN=$tmp CGO_ENABLED=1 GOFLAGS=-mod=mod go install -tags seccomp "github.com/opencontainers/runc@$RUNC_VERSION"
  install -m 0755 "$tmp/runc" "$DEST/runc"
  rm -rf "$tmp"
fi
log "$("$DEST/runc" --version | head -1) at $DEST/runc"

mkdir -p "$(dirname "$CONF")"
python3 - "$CONF" "$DEST/runc" "$NAME" <<'PY'
import json, os, sys
conf, path, name = sys.argv[1:4]
data = {}
if os.path.exists(conf) and os.path.getsize(conf) > 0:
    with open(conf) as f:
        data = json.load(f)  # a broken file stops here, untouched
runtimes = data.setdefault("runtimes", {})
if runtimes.get(name) == {"path": path}:
    sys.exit(0)
runtimes[name] = {"path": path}
tmp = conf + ".sandboxer-tmp"
with open(tmp, "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
os.replace(tmp, conf)
print("runc: registered " + name + " in " + conf, file=sys.stderr)
PY

listed() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q "\"$NAME\""; }
if ! listed; then
  pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd || true)
  [[ -n $pid ]] || { log "no running dockerd found"; exit 1; }
  log "reloading dockerd (pid $pid) with SIGHUP"
  kill -HUP "$pid"
  for _ in $(seq 1 20); do listed && break; sleep 0.5; done
  listed || { log "dockerd did not pick up $NAME; see /var/log/dockerd.log"; exit 1; }
fi
log "dockerd lists runtime $NAME: sandboxes run on it"
