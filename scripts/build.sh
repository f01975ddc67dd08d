#!/usr/bin/env bash
# Builds bin/airlock, bin/airlock-agent and bin/airlock-bench as static
# binaries. airlock-bench holds the benchmarks (`airlock bench …` runs the
# airlock-bench next to airlock), so the product binary links none of them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/airlock ./cmd/airlock-agent ./cmd/airlock-bench
