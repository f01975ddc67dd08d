#!/usr/bin/env bash
# Runs Airlock's tests. Run as root.
#
#   ./scripts/test.sh            the full suite (what .ci/run calls): static
#                                checks, then side by side the unit packages
#                                with -race, the integration package in
#                                groups (each in a network namespace of its
#                                own) on real runc, crun, gVisor, QEMU,
#                                PostgreSQL, Chromium and the E2B SDKs, and
#                                the Kubernetes manifests against a real
#                                kube-apiserver
#   ./scripts/test.sh --fast     gofmt, vet, the architecture tests and
#                                every package's unit tests (-short: no real
#                                runtime, VM, PostgreSQL, browser or npm);
#                                installs nothing
#   ./scripts/test.sh --fresh    the full suite with AIRLOCK_TEST_CACHE at a
#                                new empty directory, as on a new machine
#   ./scripts/test.sh --soak N   the integration package N times in a row,
#                                under the load of the unit packages run
#                                over and over beside it
#   --race-servers               also build the servers the integration
#                                tests start with the race detector
# Other arguments go to scripts/testrun (e.g. --groups 4, --run 'TestX$',
# --skip-kube); it ends with each step's time and the 15 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:/usr/local/bin:$PATH"

fast=0
fresh=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) fast=1; args+=(-fast) ;;
    --fresh) fresh=1 ;;
    --soak) args+=(-soak "$2"); shift ;;
    --race-servers) export AIRLOCK_TEST_RACE_SERVERS=1 ;;
    --*) args+=("-${1#--}") ;;
    *) args+=("$1") ;;
  esac
  shift
done

if [ "$fresh" = 1 ]; then
  AIRLOCK_TEST_CACHE=$(mktemp -d /var/tmp/airlock-test-fresh-XXXXXX)
  export AIRLOCK_TEST_CACHE
  echo "test: --fresh: AIRLOCK_TEST_CACHE=$AIRLOCK_TEST_CACHE (empty; removed after a passing run)"
fi

if [ "$fast" = 0 ]; then
  ./scripts/install-deps.sh
  # Node.js >= 20.18.1 for the E2B SDK and console browser tests, which
  # install their pinned npm packages into $AIRLOCK_TEST_CACHE.
  ./scripts/install-node.sh
fi

status=0
go run ./scripts/testrun "${args[@]}" || status=$?
if [ "$fresh" = 1 ] && [ "$status" = 0 ]; then
  rm -rf "$AIRLOCK_TEST_CACHE"
fi
exit "$status"
