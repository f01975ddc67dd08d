#!/bin/sh
# Regenerates the Go code of E2B envd's filesystem service
# (internal/e2b/envdfs/filesystempb and filesystempbconnect) from
# internal/e2b/envdfs/proto/filesystem/*.proto (package filesystem; split in
# three files so each generated file stays under the project's 1000 lines).
#
# Needs protoc (3.21+), protoc-gen-go (v1.36.x) and protoc-gen-connect-go
# (v1.19.x); the plugins are looked up in $GOBIN, then ~/go/bin, then $PATH.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bin=${GOBIN:-$(go env GOPATH)/bin}
PATH="$bin:$HOME/go/bin:$PATH"
export PATH

for tool in protoc protoc-gen-go protoc-gen-connect-go; do
	command -v "$tool" >/dev/null || { echo "gen-e2b-fs-protos: $tool not found" >&2; exit 1; }
done

module=github.com/airlockdev/airlock
protoc \
	-I internal/e2b/envdfs/proto \
	--go_out=. --go_opt=module="$module" \
	--connect-go_out=. --connect-go_opt=module="$module" \
	internal/e2b/envdfs/proto/filesystem/*.proto

# The project's import grouping, so the generated files pass its checks.
if command -v goimports >/dev/null; then
	goimports -local "$module" -w internal/e2b/envdfs/filesystempb
fi
