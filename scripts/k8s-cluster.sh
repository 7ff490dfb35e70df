#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, with no registry and no internet:
#   bash scripts/k8s-cluster.sh [up|down|status|gvisor]   (make k8s-cluster / make k8s-cluster-down)
# - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl are built with
#   `go build` from the Go module proxy at the version pinned in scripts/k8s-tools/go.mod, and
#   cached under $HOME/.cache/sandboxer-k8s/<version>/bin (a second run builds nothing);
# - etcd is Debian's etcd-server; containerd and runc are Debian's (a SEPARATE containerd, with
#   its own config, root, state and socket under the cluster directory; Docker's is not touched);
# - pods get loopback only (Debian's containernetworking-plugins);
# - the pause image is a static Go binary made here, and the sandbox images are imported from
#   the local Docker engine into containerd's k8s.io namespace: nothing is ever pulled.
# Everything lives under $K8S_DIR (default .k8s in the checkout): certificates, kubeconfigs,
# data, logs and pid files. The admin kubeconfig is $K8S_DIR/kubeconfig. Every component
# listens on 127.0.0.1 only. `down` stops what `up` started and unmounts what it mounted.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${K8S_DIR:-$ROOT/.k8s}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
TOOLS=$ROOT/scripts/k8s-tools
VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$TOOLS/go.mod")
CACHE=${K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandboxer-k8s/$VERSION}
BIN=$CACHE/bin
export PATH=$BIN:$PATH:/usr/local/go/bin:/usr/sbin:/sbin

# Loopback ports (chosen away from the usual ones, so nothing else's defaults collide).
ETCD_PORT=23790 ETCD_PEER_PORT=23800
API_PORT=16443
CM_PORT=10557 SCHED_PORT=10559
KUBELET_PORT=10650 KUBELET_HEALTHZ_PORT=10648
NODE=localhost # the node's name: the apiserver reaches the kubelet by it (Hostname address)
PAUSE_IMAGE=registry.k8s.io/pause:3.10
LINK=sbxk8s0 LINK_PEER=sbxk8s1 # the pods' dead-end link (see write_configs)
POD_SUBNET=198.18.0.0/24
SOCK=$DIR/containerd.sock
# The patched runc of scripts/runc.sh, when the host's runc has known escapes.
PATCHED_RUNC=/usr/local/lib/sandboxer/runc
# gVisor's runtime handler (see gvisor below), when it was set up.
RUNSC_WRAPPER=$DIR/runsc/runsc
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet pv-provisioner)
# Workspaces' PersistentVolumeClaims: the default StorageClass, served by pv_provisioner below.
STORAGE_CLASS=sandboxer-hostpath PV_PROVISIONER=sandboxer.dev/hostpath
# The kernel settings the kubelet sets (protectKernelDefaults: false); `down` puts them back.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

log() { echo "k8s-cluster: $*" >&2; }
die() { log "$*"; exit 1; }
kc() { kubectl --kubeconfig "$DIR/kubeconfig" "$@"; }
ctrk() { ctr -a "$SOCK" -n k8s.io "$@"; }

pid_of() { cat "$DIR/pids/$1.pid" 2>/dev/null || true; }
alive() { # NAME: the process its pid file names is alive and is that program
  local pid; pid=$(pid_of "$1")
  [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$1"
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds, or fail naming WHAT and its log.
wait_for() {
  local what=$1 secs=$2; shift 2
  local i
  for ((i = 0; i < secs * 4; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  die "$what did not become ready in ${secs}s; see $DIR/logs/$what.log"
}

# ---- prerequisites -----------------------------------------------------------------------
need_packages() {
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  [[ -x /usr/lib/cni/loopback ]] || missing+=(containernetworking-plugins)
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl)
  ((${#missing[@]})) || return 0
  [[ $(id -u) -eq 0 && -f /etc/debian_version ]] || die "missing ${missing[*]}: install them (Debian packages) and run again"
  log "installing ${missing[*]} from Debian's packages"
  # Packages must not start their own services (etcd's would take port 2379): deny starts
  # while installing, unless a policy already exists.
  local policy=/usr/sbin/policy-rc.d made=
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made=1; fi
  apt-get update -qq >/dev/null 2>&1 || log "apt-get update reported problems (continuing)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [[ -z $made ]] || rm -f "$policy"
}

build_binaries() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl pause) b ok=1
  for b in "${want[@]}"; do [[ -x $BIN/$b ]] || ok=; done
  [[ -z $ok ]] || return 0
  command -v go >/dev/null || die "go is not on PATH: the Kubernetes binaries are built from source"
  log "building Kubernetes $VERSION from the Go module proxy into $BIN (first time only; takes a while)"
  mkdir -p "$BIN.tmp"
  local start=$SECONDS minor=${VERSION#v1.}
  minor=${minor%%.*}
  # The version the components report (a module build has no git tree to read it from).
  local ld="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  # nice: the build takes both cores for a long time; let everything else on the machine go first.
  (cd "$TOOLS" && CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags='-s -w' -o "$BIN.tmp/" ./pause &&
    nice -n 15 go build -trimpath -ldflags="$ld" -o "$BIN.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
  mkdir -p "$BIN"
  mv "$BIN.tmp"/* "$BIN/" && rmdir "$BIN.tmp"
  log "built in $((SECONDS - start))s"
}

# ---- certificates and kubeconfigs --------------------------------------------------------
# cert NAME CN O EKU [SAN]: a key and a certificate signed by the cluster's CA.
cert() {
  local name=$1 cn=$2 o=$3 eku=$4 san=${5:-} d=$DIR/pki subj
  [[ -s $d/$name.crt ]] && return 0
  subj="/CN=$cn"; [[ -z $o ]] || subj="/O=$o$subj"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subj" \
    -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -z $san ]] || echo "subjectAltName=$san"
  } >"$d/$name.ext"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 3650 -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null
  rm -f "$d/$name.csr" "$d/$name.ext"
}

kubeconfig() { # FILE CERTNAME USER
  [[ -s $1 ]] && return 0
  local d=$DIR/pki
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandboxer
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$d/ca.crt")
users:
- name: $3
  user:
    client-certificate-data: $(base64 -w0 "$d/$2.crt")
    client-key-data: $(base64 -w0 "$d/$2.key")
contexts:
- name: sandboxer
  context: {cluster: sandboxer, user: $3}
current-context: sandboxer
EOF
  chmod 600 "$1"
}

make_pki() {
  local d=$DIR/pki
  mkdir -p "$d" && chmod 700 "$d"
  if [[ ! -s $d/ca.crt ]]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=sandboxer-k8s-ca" -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  fi
  cert apiserver kube-apiserver "" serverAuth \
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.0.0.1"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
  cert admin sandboxer-admin system:masters clientAuth
  cert controller-manager system:kube-controller-manager "" clientAuth
  cert scheduler system:kube-scheduler "" clientAuth
  cert kubelet-client "system:node:$NODE" system:nodes clientAuth
  cert kubelet-serving "$NODE" "" serverAuth "DNS:$NODE,IP:127.0.0.1"
  if [[ ! -s $d/sa.key ]]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/sa.key" 2>/dev/null
    openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  fi
  kubeconfig "$DIR/kubeconfig" admin sandboxer-admin
  kubeconfig "$DIR/controller-manager.kubeconfig" controller-manager system:kube-controller-manager
  kubeconfig "$DIR/scheduler.kubeconfig" scheduler system:kube-scheduler
  kubeconfig "$DIR/kubelet.kubeconfig" kubelet-client "system:node:$NODE"
}

# ---- configuration files -----------------------------------------------------------------
write_configs() {
  mkdir -p "$DIR"/{containerd/root,containerd/state,containerd/runc,containerd/opt,cni,logs,pids,kubelet,pod-logs,etcd}
  # The pods run on the patched runc that scripts/runc.sh built (make engine), where the host's
  # has known escapes (Debian's 1.1.5); otherwise on the host's.
  local runc_binary=""
  if [[ -x $PATCHED_RUNC ]]; then
    runc_binary="BinaryName = \"$PATCHED_RUNC\""
    log "pods run on $("$PATCHED_RUNC" --version | head -1) ($PATCHED_RUNC)"
  else
    log "pods run on the host's $(runc --version | head -1): no patched runc at $PATCHED_RUNC (make engine builds one where the host's has known escapes)"
  fi
  cat >"$DIR/containerd.toml" <<EOF
# containerd for the sandboxer test cluster only (scripts/k8s-cluster.sh): its own root,
# state and socket; Docker's containerd is a different process with a different config.
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$SOCK"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "$DIR/containerd/runc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Negative oom_score_adj (the CRI's -998 for sandboxes, the kubelet's -997 for Guaranteed pods)
  # needs CAP_SYS_RESOURCE, which this machine's root lacks ("failed to update
  # /proc/self/oom_score_adj: Permission denied" from runc): clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        $runc_binary
        SystemdCgroup = false
        Root = "$DIR/containerd/runc"
EOF
  if [[ -x $RUNSC_WRAPPER ]]; then
    # gVisor (bash scripts/k8s-cluster.sh gvisor): Debian's runsc package has no
    # containerd-shim-runsc-v1, so containerd's runc shim runs runsc through a wrapper that
    # adds --network=none (runsc of this build fails to start a sandbox with a network; the
    # pods have loopback only anyway), as dockerd does for a runtime with runtimeArgs.
    cat >>"$DIR/containerd.toml" <<EOF
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        BinaryName = "$RUNSC_WRAPPER"
        SystemdCgroup = false
        Root = "$DIR/containerd/runsc"
EOF
  fi
  # The CRI needs an eth0 with an address in every pod ("failed to find network info for
  # sandbox" with the loopback plugin alone), so pods get one that leads nowhere: a macvlan in
  # private mode (no pod reaches another) over one end of a veth pair whose other end stays
  # down (no frame reaches the host), in a benchmarking range with no route beyond it.
  cat >"$DIR/cni/10-isolated.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "sandboxer-isolated", "plugins": [{"type": "macvlan", "master": "$LINK", "mode": "private",
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "dataDir": "$DIR/cni-ipam"}}]}
EOF
  cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $DIR/pki/kubelet-serving.crt
tlsPrivateKeyFile: $DIR/pki/kubelet-serving.key
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
# This machine has cgroup v1: the kubelet must be told that is acceptable.
failCgroupV1: false
failSwapOn: false
podLogsDir: $DIR/pod-logs
resolvConf: ""
clusterDomain: cluster.local
# No registry: an image the kubelet garbage-collected could never come back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
serializeImagePulls: false
# Every image in the node's status (the runtime's ImageExists reads it), and a pids cap per pod
# (a pod spec cannot set one per container).
nodeStatusMaxImages: -1
podPidsLimit: 1024
rotateCertificates: false
EOF
}

# ---- images ------------------------------------------------------------------------------
# The pause image, as a docker-archive tarball made by hand: one layer holding the static binary.
import_pause() {
  ctrk images ls -q | grep -x "$PAUSE_IMAGE" >/dev/null && return 0
  local t; t=$(mktemp -d)
  mkdir "$t/rootfs" && cp "$BIN/pause" "$t/rootfs/pause"
  tar -C "$t/rootfs" --owner=0 --group=0 -cf "$t/layer.tar" pause
  local diff; diff=$(sha256sum "$t/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diff" >"$t/config.json"
  printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$PAUSE_IMAGE" >"$t/manifest.json"
  tar -C "$t" -cf "$t/image.tar" manifest.json config.json layer.tar
  ctrk images import "$t/image.tar" >/dev/null
  rm -rf "$t"
  log "imported $PAUSE_IMAGE (made locally)"
}

# The final sandbox images (sandboxer/<name>, not the -core ones) from the local Docker engine,
# all tags of one image in one `docker save`; each image id is imported once. Only the tags this
# checkout's server uses (`sandboxer images list`), not those older builds left in the engine.
# K8S_IMAGES="base python" limits the import to those names.
import_sandbox_images() {
  if ! docker version >/dev/null 2>&1; then
    log "no Docker engine answers: sandbox images not imported (run make images, then this again)"
    return 0
  fi
  touch "$DIR/imported"
  local id refs n=0 want=${K8S_IMAGES:-} current=""
  if [ -x "$ROOT/bin/sandboxer" ]; then
    current=$("$ROOT/bin/sandboxer" images list 2>/dev/null | awk '{printf " %s", $2}')
  fi
  while read -r id refs; do
    grep -qxF "$id" "$DIR/imported" && continue
    log "importing $refs"
    # shellcheck disable=SC2086 # refs is a list
    docker save $refs | ctrk images import - >/dev/null
    echo "$id" >>"$DIR/imported"
    n=$((n + 1))
  done < <(docker images --format '{{.ID}} {{.Repository}}:{{.Tag}}' |
    awk -v want=" $want " -v current="$current " '$2 ~ /^sandboxer\// && $2 !~ /-core:/ && $2 !~ /:<none>$/ {
        name = $2; sub(/^sandboxer\//, "", name); sub(/:.*/, "", name)
        if (want != "  " && index(want, " " name " ") == 0) next
        if (index(current, " " $2 " ")) used[$1] = 1
        refs[$1] = refs[$1] " " $2 }
      END { for (id in refs) if (current == " " || used[id]) print id refs[id] }')
  log "sandbox images: $n imported now, $(wc -l <"$DIR/imported") in all"
}

# The namespace, service account, RBAC and NetworkPolicy a real cluster would get
# (deploy/kubernetes/sandboxer.yaml), and a kubeconfig for that service account, in that
# namespace, with a token of a day: make test-k8s runs as it.
sa_kubeconfig() {
  kc apply -f "$ROOT/deploy/kubernetes/sandboxer.yaml" >/dev/null
  local token f=$DIR/sandboxer.kubeconfig
  token=$(kc create token sandboxer -n sandboxer --duration=24h)
  (
    umask 077
    cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandboxer
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$DIR/pki/ca.crt")
users:
- name: sandboxer
  user:
    token: $token
contexts:
- name: sandboxer
  context: {cluster: sandboxer, user: sandboxer, namespace: sandboxer}
current-context: sandboxer
EOF
  )
}

# ---- processes ---------------------------------------------------------------------------
start() { # NAME CMD...: start in the background, in its own session, logging under logs/
  local name=$1; shift
  if alive "$name"; then return 0; fi
  setsid "$@" >>"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/pids/$name.pid"
}

stop() { # NAME: TERM, then KILL after 20 s
  local name=$1 pid i
  alive "$name" || { rm -f "$DIR/pids/$name.pid"; return 0; }
  pid=$(pid_of "$name")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 80; i++)); do alive "$name" || break; sleep 0.25; done
  if alive "$name"; then log "$name did not stop on TERM: KILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; fi
  rm -f "$DIR/pids/$name.pid"
}

save_sysctls() {
  [[ -s $DIR/sysctl.orig ]] && return 0
  local k
  for k in "${SYSCTLS[@]}"; do echo "$k=$(sysctl -n "$k")"; done >"$DIR/sysctl.orig"
}

up() {
  local all=1 c
  for c in "${COMPONENTS[@]}"; do alive "$c" || all=; done
  if [[ -n $all ]]; then
    log "already running (kubeconfig: $DIR/kubeconfig)"
    import_sandbox_images
    sa_kubeconfig
    return 0
  fi
  local any= port
  for c in "${COMPONENTS[@]}"; do alive "$c" && any=1; done
  if [[ -z $any ]]; then
    # Nothing of ours runs: a listener on our ports is someone else's (another checkout's cluster?).
    for port in $ETCD_PORT $ETCD_PEER_PORT $API_PORT $CM_PORT $SCHED_PORT $KUBELET_PORT $KUBELET_HEALTHZ_PORT; do
      if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
        die "port $port is in use by another process (another checkout's cluster? make k8s-cluster-down there)"
      fi
    done
  fi
  local t0=$SECONDS
  need_packages
  build_binaries
  local t1=$SECONDS
  make_pki
  write_configs
  save_sysctls

  if ! ip link show "$LINK" >/dev/null 2>&1; then
    ip link add "$LINK" type veth peer name "$LINK_PEER"
    ip link set "$LINK" up # its peer stays down: nothing the pods send arrives anywhere
  fi

  start containerd containerd --config "$DIR/containerd.toml"
  wait_for containerd 30 ctr -a "$SOCK" version
  import_pause

  start etcd etcd --name sandboxer --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "sandboxer=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
    --enable-v2=false
  wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  local p=$DIR/pki
  start kube-apiserver kube-apiserver --bind-address=127.0.0.1 --secure-port="$API_PORT" \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" --kubelet-preferred-address-types=Hostname \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$p/sa.pub" \
    --service-account-signing-key-file="$p/sa.key" --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=false \
    --profiling=false
  wait_for kube-apiserver 90 kc get --raw /readyz

  start kube-controller-manager kube-controller-manager --bind-address=127.0.0.1 --secure-port="$CM_PORT" \
    --kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
    --use-service-account-credentials=true --leader-elect=false --profiling=false
  start kube-scheduler kube-scheduler --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --kubeconfig="$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --leader-elect=false --profiling=false
  start kubelet kubelet --config="$DIR/kubelet.yaml" --kubeconfig="$DIR/kubelet.kubeconfig" \
    --root-dir="$DIR/kubelet" --cert-dir="$DIR/kubelet/pki" --hostname-override="$NODE"
  wait_for kubelet 90 kc wait --for=condition=Ready "node/$NODE" --timeout=1s
  wait_for kube-controller-manager 60 kc get serviceaccount default -n default

  storage_class
  start pv-provisioner bash "$ROOT/scripts/k8s-cluster.sh" pv-provisioner
  import_sandbox_images
  sa_kubeconfig
  if [[ -x $RUNSC_WRAPPER ]]; then runtime_class; fi
  log "up in $((SECONDS - t1))s (build/install $((t1 - t0))s); kubeconfig: $DIR/kubeconfig"
}

# The default StorageClass and its provisioner, for workspaces' claims. Kubernetes' own
# host-path provisioner (kube-controller-manager --enable-hostpath-provisioner) makes each
# volume's directory root's with mode 0750, which a pod running as uid 1000 (restricted Pod
# Security) cannot write, and a host-path volume takes no fsGroup. So this loop provisions
# instead: a claim of the class gets a hostPath PersistentVolume bound to it, whose directory
# under $DIR/pv is made uid 1000's, mode 0700; a released volume is deleted with its directory.
storage_class() {
  kc apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $STORAGE_CLASS
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: $PV_PROVISIONER
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
}

pv_provisioner() {
  mkdir -p "$DIR/pv"
  local ns name uid phase size pv
  while :; do
    while read -r ns name uid phase size; do
      [[ $phase == Pending && -n $uid ]] || continue
      pv=pvc-$uid
      kc get pv "$pv" >/dev/null 2>&1 && continue
      install -d -o 1000 -g 1000 -m 0700 "$DIR/pv/$pv"
      kc apply -f - >/dev/null <<EOF || log "provision $pv for $ns/$name failed"
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $pv
  labels: {dev.sandboxer.pv: "true"}
  annotations: {pv.kubernetes.io/provisioned-by: $PV_PROVISIONER}
spec:
  storageClassName: $STORAGE_CLASS
  capacity: {storage: $size}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: $ns, name: $name, uid: $uid}
  hostPath: {path: $DIR/pv/$pv, type: Directory}
EOF
    done < <(kc get pvc -A -o jsonpath='{range .items[?(@.spec.storageClassName=="'"$STORAGE_CLASS"'")]}{.metadata.namespace} {.metadata.name} {.metadata.uid} {.status.phase} {.spec.resources.requests.storage}{"\n"}{end}' 2>/dev/null)
    while read -r pv; do
      [[ $pv == pvc-* ]] || continue
      rm -rf "${DIR:?}/pv/$pv"
      kc delete pv "$pv" --wait=false >/dev/null 2>&1 || true
    done < <(kc get pv -l dev.sandboxer.pv=true -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}' 2>/dev/null)
    sleep 1
  done
}

# The pod sandboxes' tasks still running in our containerd.
tasks() { ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null || true; }

down() {
  if alive kube-apiserver && alive kubelet; then
    # Let the kubelet tear pods down itself (containers, sandboxes, netns, volumes).
    kc delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
    local i
    for ((i = 0; i < 120; i++)); do [[ -z $(tasks) ]] && break; sleep 0.5; done
  fi
  local c
  for c in pv-provisioner kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
  if alive containerd; then
    local t
    for t in $(tasks); do
      ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
    sleep 1
    for t in $(tasks); do ctr -a "$SOCK" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true; done
    stop containerd
  fi
  # Shims of our containerd (they name its socket) outlive it when a task was not deleted.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do kill -KILL "$pid" 2>/dev/null || true; done
  # gVisor's sandboxes and gofers (handler runsc) are the shims' children: those of our runsc root.
  for pid in $(pgrep -f "^runsc-(sandbox|gofer) --root=$DIR/containerd/runsc" || true); do kill -KILL "$pid" 2>/dev/null || true; done
  # Mounts under the cluster directory (kubelet volumes, netns, rootfs), deepest first.
  local m left=
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || left+=" $m"
  done < <(awk -v d="$DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  [[ -z $left ]] || log "could not unmount:$left"
  if ip link show "$LINK" >/dev/null 2>&1; then ip link del "$LINK"; fi
  # libcni keeps its cache of results in /var/lib/cni whatever the config says.
  rm -f /var/lib/cni/results/sandboxer-isolated-*
  # The kubelet's device-plugin socket and checkpoint sit in a path it does not take from
  # --root-dir, and it links container logs into /var/log/containers: remove what is its.
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/log/containers 2>/dev/null || true
  # The kubelet's pod cgroups (cgroupfs driver), now empty.
  local cg
  for cg in /sys/fs/cgroup/*/kubepods; do
    [[ -d $cg ]] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [[ -s $DIR/sysctl.orig ]]; then
    local kv
    while read -r kv; do sysctl -q -w "$kv" >/dev/null 2>&1 || log "could not restore $kv"; done <"$DIR/sysctl.orig"
    rm -f "$DIR/sysctl.orig"
  fi
  log "down"
}

# ---- gVisor (optional) ---------------------------------------------------------------------
# `gvisor` installs Debian's runsc, writes the wrapper, registers handler "runsc" in the
# cluster's containerd (restarting that containerd only when its config changed: running
# containers keep running, streams to them break) and creates RuntimeClass runsc. Idempotent.
gvisor() {
  alive containerd && alive kube-apiserver || die "the cluster is not running: make k8s-cluster first"
  if ! command -v runsc >/dev/null 2>&1; then
    log "installing runsc from Debian's packages"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends runsc >/dev/null
  fi
  local runsc
  runsc=$(command -v runsc)
  log "$("$runsc" --version 2>/dev/null | head -1)"
  mkdir -p "$DIR/runsc" "$DIR/containerd/runsc"
  runsc_wrapper "$runsc" >"$RUNSC_WRAPPER.tmp"
  chmod 0755 "$RUNSC_WRAPPER.tmp"
  mv "$RUNSC_WRAPPER.tmp" "$RUNSC_WRAPPER"
  local before after
  before=$(sha256sum <"$DIR/containerd.toml")
  write_configs
  after=$(sha256sum <"$DIR/containerd.toml")
  if [[ $before != "$after" ]]; then
    log "restarting the cluster's containerd with handler runsc (its containers keep running)"
    stop containerd
    start containerd containerd --config "$DIR/containerd.toml"
    wait_for containerd 30 ctr -a "$SOCK" version
  fi
  runtime_class
}

# The wrapper containerd's runc shim runs as its runc: runsc with --network=none. The runc shim
# knows a container's end only by its pid (the pid file): a container that joins its pod's
# gVisor sandbox (the CRI's annotations io.kubernetes.cri.container-type: container and
# .sandbox-id, which runsc honours) has the sandbox's pid, which outlives it, so the kubelet
# would never see it end (seen: the container "stopped" in `runsc list`, "running" in the pod's
# status, for ever). So `create` drops those annotations: each container is a gVisor sandbox of
# its own, as under Docker (containerd-shim-runsc-v1 would track them; Debian ships none). And
# `kill` of an ended container answers as runc does (below).
runsc_wrapper() { # RUNSC
  echo '#!/bin/sh'
  echo "RUNSC=$1"
  cat <<'WRAP'
bundle= prev=
for a in "$@"; do
  if [ "$prev" = --bundle ]; then bundle=$a; fi
  prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  python3 - "$bundle/config.json" <<'PY' || exit 1
import json, sys
p = sys.argv[1]
with open(p) as f:
    spec = json.load(f)
a = spec.get("annotations") or {}
if a.pop("io.kubernetes.cri.container-type", None) is not None:
    a.pop("io.kubernetes.cri.sandbox-id", None)
    with open(p + ".tmp", "w") as f:
        json.dump(spec, f)
    import os
    os.replace(p + ".tmp", p)
PY
fi
# The shim takes "container not running" from kill as "already gone"; runsc says "sandbox is
# not running" for a container that ended, which the CRI took for a failed kill and retried
# for ever (seen: "failed to handle container TaskExit event … sandbox is not running").
case " $* " in
*" kill "*)
  out=$("$RUNSC" --network=none "$@" 2>&1) && { [ -z "$out" ] || printf '%s\n' "$out"; exit 0; }
  rc=$?
  case $out in *"is not running"*) echo "container not running" >&2; exit 1 ;; esac
  printf '%s\n' "$out" >&2
  exit $rc
  ;;
esac
exec "$RUNSC" --network=none "$@"
WRAP
}

runtime_class() {
  kc apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: runsc}
handler: runsc
EOF
  log "RuntimeClass runsc (handler runsc)"
}

status() {
  local c rc=0
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then echo "$c running (pid $(pid_of "$c"))"; else echo "$c stopped"; rc=1; fi
  done
  return $rc
}

case ${1:-up} in
up) up ;;
down) down ;;
status) status ;;
gvisor) gvisor ;;
pv-provisioner) pv_provisioner ;;
*) die "unknown command ${1}: use up, down or status or gvisor" ;;
esac
