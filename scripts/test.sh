#!/usr/bin/env bash
# Runs Airlock's whole test suite: static checks, then every package's tests
# with the race detector (real runc, crun, runsc, PostgreSQL). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export PATH="/usr/local/go/bin:/usr/local/bin:$PATH"

echo "test: gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "test: go vet"
go vet ./...
echo "test: go test -race"
go test -race -count=1 -timeout 30m "$@" ./...
