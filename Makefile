# sandboxer — see README.md. `make run` and `make test` set up everything they
# need (Docker engine, base image, sandbox images) on a fresh Debian machine.
SHELL := /bin/bash
# Work from a bare environment too (CI, cron): Go where Debian images put it, and a HOME for its caches.
export PATH := $(PATH):/usr/local/go/bin
ifeq ($(HOME),)
export HOME := $(shell getent passwd $$(id -u) | cut -d: -f6)
endif
GO    ?= go
BIN   := bin/sandboxer
# The sandbox supervisor: static, embedded into $(BIN) (package images) and copied into every image.
SUPERVISOR := images/supervisor/sandboxer-supervisor
GOTEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: all build supervisor engine base-image images run test test-unit test-integration test-podman test-containerd k8s-cluster k8s-cluster-down k8s-gvisor test-k8s leftovers lint bench clean doctor gvisor conformance

all: build

# With the supervisor's flags (no cgo, -trimpath): a first build from an empty Go cache compiles the
# standard library and the modules both use once, not twice (docs/operations.md).
build: supervisor
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/sandboxer

# Built before $(BIN), which embeds it; a test or tool built with plain `go build` gets
# the same bytes as long as this ran first.
supervisor:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(SUPERVISOR) ./cmd/sandboxer-supervisor

# Make sure a Docker engine answers (installs docker.io and starts dockerd on Debian as root).
engine:
	@bash scripts/engine.sh

# debian:bookworm-slim, made locally with debootstrap when it cannot be pulled.
base-image: engine
	@bash scripts/base-image.sh

# The sandbox images, built through the Engine API: per image a core image tagged by a hash of its
# build context, then the final image (core + supervisor layer) tagged by a hash of both.
# Where the host's egress is TLS-intercepted, the host trusts extra CAs: image builds that fetch
# from the npm registry or the Go proxy get them too (build argument only, not kept in images).
BUILD_CA := $(wildcard /usr/local/share/ca-certificates/*.crt)
images: build base-image
	@if [ -n "$(BUILD_CA)" ]; then cat $(BUILD_CA) > bin/build-ca.pem; export SANDBOXER_BUILD_CA_FILE=$(CURDIR)/bin/build-ca.pem; fi; \
	  echo ./$(BIN) images build; ./$(BIN) images build

# Everything but the server's MCP messages goes to stderr, so `make run` can itself be an MCP command.
# -j2: the Go builds run while the engine is installed and the base image made. The server then
# serves at once and builds the sandbox images it lacks in the background (--build-images): on a
# first run, a job whose image is not built yet is told so, and list_languages shows it as building.
run:
	@$(MAKE) --no-print-directory -s -j2 build base-image >&2
	@if [ -n "$(BUILD_CA)" ]; then cat $(BUILD_CA) > bin/build-ca.pem; export SANDBOXER_BUILD_CA_FILE=$(CURDIR)/bin/build-ca.pem; fi; \
	  exec ./$(BIN) serve --build-images

# Opt-in: build current gVisor (runsc) from the Go module proxy and register it with the
# running dockerd as runtime runsc (KVM where it runs, else systrap; --oci-seccomp; merging
# /etc/docker/daemon.json, reloading with SIGHUP; the engine's experimental mode, which serves
# checkpoints, takes one restart of dockerd the first time). Then `runtime: runsc` in a policy
# runs jobs under it, workspaces on it hibernate and fork with their processes, and `make test`
# re-runs the hardening and isolation tests under it (TestGVisor*, TestHardeningFromInside/runsc).
gvisor: engine
	@bash scripts/gvisor.sh

doctor: images
	./$(BIN) doctor

# Unit, Docker integration and end-to-end tests, then a check that no sandbox was left behind.
# First, a check that git tracks no built executable (scripts/no-binaries.sh).
# The end-to-end tests drive a -race build of the server, and fail on any race it reports.
# It is built here, after `images` (through `build`) made the supervisor it embeds.
# E2E_RACE=0 drives the plain build instead: about a third less time in the e2e tests on a
# 2-core machine, without the race detector watching the server (docs/operations.md).
# The leftover check counts only containers made since SUITE_START (when make read this file).
E2E_RACE ?= 1
E2E_PLAIN = $(filter 0,$(E2E_RACE))
E2E_BIN = $(if $(E2E_PLAIN),$(BIN),$(BIN)-race)
test: SUITE_START := $(shell date +%s)
test:
	@bash scripts/no-binaries.sh
	@$(MAKE) --no-print-directory -j2 images
	@bash scripts/test-deps.sh
	$(if $(E2E_PLAIN),,$(GO) build -race -o $(BIN)-race ./cmd/sandboxer)
	SANDBOXER_BIN=$(CURDIR)/$(E2E_BIN) $(GO) test $(GOTEST_FLAGS) ./...
	bash scripts/conformance.sh $(CURDIR)/$(E2E_BIN)
	@# Fault tests restart the Docker daemon, so they run alone, after the rest.
	SANDBOXER_FAULT_TESTS=1 SANDBOXER_BIN=$(CURDIR)/$(E2E_BIN) $(GO) test -count=1 ./test/faults
	SANDBOXER_CHECK_LEFTOVERS=1 SANDBOXER_SUITE_START=$(SUITE_START) $(GO) test -count=1 -run TestNoLeftoverContainers ./test/leftovers

# The runtime contract suite, the runtime's engine tests and the e2e core (jobs, stdin, hardening
# read from inside, a session, a workspace, restart adoption, doctor) against rootful Podman's
# Docker-compatible API (scripts/podman.sh starts it; the images are built there through the same
# Engine API calls). Not part of `make test`: see docs/engines.md for what it takes and what differs.
PODMAN_HOST := unix:///run/sandboxer-podman/podman.sock
PODMAN_ROOTLESS_HOST := unix:///run/sandboxer-podman-rootless/podman.sock
PODMAN_TESTS := TestContract|TestCapabilities|TestHardeningProfile|TestHardeningFromInside|TestSandboxesRunOnThePatchedRuntime|TestWorkspacePausesAndThaws|TestExitStatusAndStreams|TestRemovedFromOutside|TestAdoptResumesOutput|TestVolumesAndMounts|TestPodman
test-podman: build base-image
	@bash scripts/podman.sh >/dev/null
	@bash scripts/podman.sh rootless >/dev/null
	@if [ -n "$(BUILD_CA)" ]; then cat $(BUILD_CA) > bin/build-ca.pem; export SANDBOXER_BUILD_CA_FILE=$(CURDIR)/bin/build-ca.pem; fi; \
	  DOCKER_HOST=$(PODMAN_HOST) ./$(BIN) images build
	$(GO) build -race -o $(BIN)-race ./cmd/sandboxer
	DOCKER_HOST=$(PODMAN_HOST) SANDBOXER_BACKEND=podman SANDBOXER_TEST_PODMAN=1 SANDBOXER_PODMAN_ROOTLESS_HOST=$(PODMAN_ROOTLESS_HOST) SANDBOXER_BIN=$(CURDIR)/$(BIN)-race \
	  $(GO) test $(GOTEST_FLAGS) -run '$(PODMAN_TESTS)' ./internal/sandbox/docker/ ./test/e2e/

# The runtime contract and capability suites and the e2e core (jobs, stdin, hardening and limits
# read from inside, a session, the warm pool, restart adoption, doctor, granted mounts) against a
# containerd of its own (scripts/containerd.sh starts Debian's containerd and copies the images over
# from the Docker engine). Not part of `make test`: see docs/engines.md for what it takes and refuses.
test-containerd: images
	@bash scripts/containerd.sh >/dev/null
	$(GO) build -race -o $(BIN)-race ./cmd/sandboxer
	SANDBOXER_TEST_CONTAINERD=1 $(GO) test $(GOTEST_FLAGS) ./internal/sandbox/containerd/
	SANDBOXER_TEST_CONTAINERD=1 SANDBOXER_BIN=$(CURDIR)/$(BIN)-race $(GO) test $(GOTEST_FLAGS) -run 'Containerd' ./test/e2e/

# A single-node Kubernetes cluster on this machine (no registry, no internet): the control plane
# and kubelet built from the Go module proxy at the version pinned in scripts/k8s-tools/go.mod
# (cached by version under ~/.cache/sandboxer-k8s), Debian's etcd, containerd and CNI plugins,
# the sandbox images imported from the local Docker engine. Everything lives under .k8s/; its
# kubeconfig is .k8s/kubeconfig. Not part of `make test`: see docs/kubernetes.md.
k8s-cluster: images
	@bash scripts/k8s-cluster.sh up

k8s-cluster-down:
	@bash scripts/k8s-cluster.sh down

# Optional: gVisor in that cluster (RuntimeClass runsc; docs/kubernetes.md#gvisor-runtimeclass-runsc).
k8s-gvisor:
	@bash scripts/k8s-cluster.sh gvisor

# The runtime contract suite and the runtime's tests on that cluster (internal/sandbox/kubernetes),
# then the e2e core of a server with backend: kubernetes (test/e2e, TestKubernetes*),
# as the service account of deploy/kubernetes/sandboxer.yaml in its namespace (restricted pod
# security): make k8s-cluster writes that kubeconfig.
KUBECONFIG_K8S ?= $(CURDIR)/.k8s/sandboxer.kubeconfig
test-k8s: build
	KUBECONFIG=$(KUBECONFIG_K8S) SANDBOXER_TEST_K8S=1 $(GO) test $(GOTEST_FLAGS) ./internal/sandbox/kubernetes/
	$(GO) build -race -o bin/sandboxer-race ./cmd/sandboxer
	KUBECONFIG=$(KUBECONFIG_K8S) SANDBOXER_TEST_K8S=1 SANDBOXER_BIN=$(CURDIR)/bin/sandboxer-race \
		$(GO) test $(GOTEST_FLAGS) -run 'Kubernetes' ./test/e2e/

# The official MCP conformance suite against the Streamable HTTP server (docs/http.md).
conformance: build
	bash scripts/conformance.sh $(CURDIR)/$(BIN)

# Pure unit tests only: no engine needed (also under CI=true). Every test that needs an engine
# skips itself under -short (testutil.RequireDocker, the e2e TestMain), so no list of packages
# is kept here.
test-unit:
	$(GO) test -short -race -count=1 ./...

lint:
	@out=$$(gofmt -l cmd internal images test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

# Latency of a tiny command through sandboxer, as ratios against baselines measured in the same run.
bench: images
	$(GO) run ./cmd/bench -bin $(BIN)

clean:
	rm -rf bin $(SUPERVISOR)
