#!/usr/bin/env bash
# Builds bin/airlock and bin/airlock-agent as static binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/airlock ./cmd/airlock-agent
