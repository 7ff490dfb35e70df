#!/usr/bin/env bash
# Make debian:bookworm-slim when it is missing and cannot be pulled (air-gapped
# hosts): debootstrap a minimal bookworm root from the mirror the host's own apt
# sources name, docker import it, tag it.
set -euo pipefail
log() { echo "base-image: $*" >&2; }
IMAGE=debian:bookworm-slim

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "$IMAGE present"; exit 0
fi
if timeout 60 docker pull -q "$IMAGE" >/dev/null 2>&1; then
  log "pulled $IMAGE"; exit 0
fi
log "$IMAGE missing and cannot be pulled: building it with debootstrap"

mirror=${DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
  # deb822 sources (URIs: ...) or one-line sources (deb URL suite ...); first Debian mirror wins.
  mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
            | awk '{print $2}' | grep -v security | grep -E '/debian/?$' | head -n1 || true)
  if [[ -z $mirror ]]; then
    mirror=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
              | awk '{print $2}' | grep -v security | grep -E '/debian/?$' | head -n1 || true)
  fi
fi
mirror=${mirror:-http://deb.debian.org/debian}

if ! command -v debootstrap >/dev/null 2>&1; then
  [[ $(id -u) -eq 0 ]] || { log "debootstrap missing: install it (apt-get install debootstrap) and re-run"; exit 1; }
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap >/dev/null
fi

root=$(mktemp -d /tmp/sandboxer-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
log "debootstrap bookworm from $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >/tmp/sandboxer-debootstrap.log 2>&1 \
  || { tail -n 30 /tmp/sandboxer-debootstrap.log >&2; exit 1; }
# Slim like the official image: no caches, docs or man pages.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
security=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -E 'debian-security/?$' | head -n1 || true)
{
  echo "deb $mirror bookworm main"
  echo "deb $mirror bookworm-updates main"
  # Security updates too, so the images do not stay at point-release versions.
  if [[ -n $security ]]; then echo "deb $security bookworm-security main"; fi
} > "$root/etc/apt/sources.list"
tar -C "$root" -c . | docker import \
  --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  - "$IMAGE" >/dev/null
log "made $IMAGE"
