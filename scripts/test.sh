#!/usr/bin/env bash
# Runs Airlock's whole test suite: static checks, then every package's tests
# with the race detector (real runc, crun, runsc, PostgreSQL), then the
# Kubernetes manifests against a real kube-apiserver. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# Node.js >= 20.18.1 for the E2B SDK test (integration/e2b_sdk_test.go),
# which installs the pinned SDKs with npm ci into $AIRLOCK_TEST_CACHE.
./scripts/install-node.sh
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
# The Kubernetes manifests' test is a module of its own (client-go and
# kustomize stay out of Airlock's go.mod).
(cd deploy/kubernetes/test && GOWORK=off go vet ./...)
echo "test: go test -race"
# The integration package is the long pole (≈ 25 min on 2 cores); the
# timeout is a guard against a hung test, not the budget.
go test -race -count=1 -timeout 45m "$@" ./...
echo "test: kubernetes manifests (server-side dry run against kube-apiserver)"
kube_bin=$(./scripts/kube-binaries.sh)
(cd deploy/kubernetes/test && KUBE_BIN_DIR="$kube_bin" GOWORK=off go test -race -count=1 -timeout 15m ./...)
