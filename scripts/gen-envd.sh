#!/usr/bin/env bash
# Regenerates internal/e2b/envd/process from internal/e2b/envd/process.proto (E2B's
# spec/envd/process/process.proto with a go_package option). The generated code is
# committed: nothing runs this at build or test time. Needs protoc (Debian's
# protobuf-compiler, 3.21) and the plugins at the versions go.mod pins:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
set -euo pipefail
cd "$(dirname "$0")/../internal/e2b/envd"
PATH=$PATH:$(go env GOPATH)/bin protoc -I. \
	--go_out=. --go_opt=module=github.com/sandboxer/sandboxer/internal/e2b/envd \
	--connect-go_out=. --connect-go_opt=module=github.com/sandboxer/sandboxer/internal/e2b/envd \
	process.proto filesystem.proto
