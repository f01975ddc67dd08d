#!/bin/sh
# Regenerates the Go code of the E2B envd protocol buffers (process
# service) from internal/e2b/envd/proto. Needs protoc (3.21+),
# protoc-gen-go, protoc-gen-connect-go and goimports on PATH or in ~/go/bin:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.19.1
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:$(go env GOPATH)/bin"
module=github.com/airlockdev/airlock
out=internal/e2b/envd
protoc -I "$out/proto" \
	--go_out=. --go_opt=module="$module" \
	--connect-go_out=. --connect-go_opt=module="$module" \
	process/types.proto process/events.proto process/input.proto process/process.proto
# The repository's import grouping (go install golang.org/x/tools/cmd/goimports@latest).
goimports -local "$module" -w "$out/processpb"
