#!/usr/bin/env bash
# Measures Airlock with E2B's own JS SDK test suite (packages/js-sdk/tests of
# e2b-dev/E2B, vitest) in the two ways an E2B client can reach Airlock
# (docs/e2b.md, "Measuring with E2B's own suite"):
#
#   url     E2B_API_URL and E2B_SANDBOX_URL name the server (the documented way)
#   domain  only E2B_DOMAIN: https://api.<domain> and https://<port>-<id>.<domain>
#           through a TLS front with a wildcard certificate and wildcard names
#
# Usage (as root, from anywhere):
#
#   scripts/e2b-suite.sh [--mode url|domain|both] [--out DIR] [--workers N]
#                        [--files 'PATH-PART …'] [--min-pass PCT] [E2B_CHECKOUT]
#   scripts/e2b-suite.sh --report DIR    (the tables again from DIR's JSON reports)
#
# E2B_CHECKOUT is a checkout of e2b-dev/E2B; without it the script makes a
# throwaway one of $E2B_COMMIT from $E2B_GIT (default: the mirror
# /work/.mirror/e2b-dev+E2B/repo; any clone URL or bare dir works), removed at
# the end. E2B's tests are never copied into this repository.
#
# What it does: installs what the SDK's tests need with npm (versions pinned
# by E2B's pnpm-lock.yaml, cached under $AIRLOCK_TEST_CACHE keyed by the E2B
# commit and the manifest), then runs TestE2BSuite (integration/e2b_suite_test.go):
# an `airlock server` on gVisor in a network namespace of its own whose only
# way out is a fake internet (the egress tests', with Docker Hub serving
# library/ubuntu:22.04 made of the Debian default's tree, and the fake CA
# trusted by the server and by its default template: test-only emulation),
# the Debian default template (recipe cache shared with TestE2BSDK), an e2b_
# key, and vitest with a JSON reporter for each mode; it prints a table per
# test file and writes results.md / results-<mode>.json to --out (default: a
# directory it names at the end). Everything it starts is removed when it
# ends (server, sandboxes, namespaces, temporary checkout).
#
# Time: about 20 minutes for both modes on a busy 2-core machine once the
# templates and npm packages are cached (a run without a backend ~3 min,
# server and templates ~3.5, URL mode ~4.5, domain mode ~6.5); the first run
# on a machine adds the Debian bootstrap (2-10 minutes).
set -euo pipefail
caller=$(pwd)
cd "$(dirname "$0")/.."
repo=$(pwd)
# abs PATH: PATH (relative to where the script was called from) made absolute.
abs() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
export PATH="/usr/local/go/bin:/usr/local/bin:$PATH"

E2B_GIT=${E2B_GIT:-/work/.mirror/e2b-dev+E2B/repo}
E2B_COMMIT=${E2B_COMMIT:-b8029973aa7da5f741f7bb1a9f833b38a0885438}
cache=${AIRLOCK_TEST_CACHE:-/var/cache/airlock-test}

mode=both
out=""
workers=2
files=""
minpass=""
checkout=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode=$2; shift ;;
    --out) out=$(abs "$2"); shift ;;
    --workers) workers=$2; shift ;;
    --files) files=$2; shift ;;       # vitest filters: parts of test file paths
    --min-pass) minpass=$2; shift ;;  # fail below this % of backend tests passing
    --report)                         # only write DIR/results.md again from DIR's JSON reports
      AIRLOCK_E2B_SUITE_REPORT=$(abs "$2") nice -n 19 go test ./integration/ -run 'TestE2BSuite$' -count=1 -v \
        | grep -v '^=== RUN'
      exit "${PIPESTATUS[0]}" ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "e2b-suite: unknown flag $1" >&2; exit 2 ;;
    *) checkout=$(abs "$1") ;;
  esac
  shift
done
case "$mode" in
  url|domain) modes=$mode ;;
  both) modes=url,domain ;;
  *) echo "e2b-suite: --mode url, domain or both" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "e2b-suite: run as root (it starts a server on gVisor in namespaces of its own)" >&2
  exit 1
fi
for bin in node npm git runsc mmdebstrap nsenter; do
  command -v "$bin" >/dev/null || { echo "e2b-suite: $bin is missing (scripts/install-deps.sh, scripts/install-node.sh)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/e2b-suite.XXXXXX)
cleanup() {
  if [ -n "${worktree_of:-}" ]; then
    git -C "$worktree_of" worktree remove --force "$tmp/E2B" 2>/dev/null || true
    git -C "$worktree_of" worktree prune 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # the EXIT trap cleans up then too

# 1. The checkout: given, or a throwaway one outside this repository.
if [ -z "$checkout" ]; then
  if [ "$(git -C "$E2B_GIT" rev-parse --is-bare-repository 2>/dev/null)" = true ]; then
    worktree_of=$E2B_GIT
    git -C "$E2B_GIT" worktree prune # checkouts of runs that were killed
    git -C "$E2B_GIT" worktree add --quiet --detach "$tmp/E2B" "$E2B_COMMIT" >/dev/null
  else
    git clone --quiet --no-checkout "$E2B_GIT" "$tmp/E2B"
    git -C "$tmp/E2B" checkout --quiet --detach "$E2B_COMMIT"
  fi
  checkout=$tmp/E2B
fi
checkout=$(cd "$checkout" && pwd)
sdk=$checkout/packages/js-sdk
[ -f "$sdk/package.json" ] && [ -d "$sdk/tests" ] || { echo "e2b-suite: $checkout has no packages/js-sdk/tests" >&2; exit 1; }
case "$checkout/" in
  "$repo"/*) echo "e2b-suite: the E2B checkout must be outside this repository" >&2; exit 1 ;;
esac
commit=$(git -C "$checkout" rev-parse HEAD 2>/dev/null || echo unknown)

# 2. npm packages: the SDK's dependencies and the test tools its backend
# tests import (vitest, msw), at the versions E2B's pnpm-lock.yaml resolved
# (pnpm itself is not needed: the tests run from the SDK's sources).
manifest=$tmp/package.json
node - "$sdk/package.json" "$checkout/pnpm-lock.yaml" >"$manifest" <<'EOF'
const fs = require('fs')
const [pkgPath, lockPath] = process.argv.slice(2)
const pkg = JSON.parse(fs.readFileSync(pkgPath, 'utf8'))
const lock = fs.existsSync(lockPath) ? fs.readFileSync(lockPath, 'utf8') : ''
// The js-sdk importer's block of pnpm-lock.yaml: "name:\n specifier: S\n version: V(peers)".
const start = lock.indexOf('\n  packages/js-sdk:\n')
const block = start < 0 ? '' : lock.slice(start + 1).split(/\n  \S/)[0]
function locked(name) {
  const esc = name.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
  const m = block.match(new RegExp(`\\n {6}'?${esc}'?:\\n {8}specifier: [^\\n]+\\n {8}version: ([^\\s(]+)`))
  return m ? m[1] : null
}
const deps = {}
const want = { ...pkg.dependencies, ...(pkg.optionalDependencies || {}) }
for (const t of ['vitest', 'msw', 'dotenv', 'error-stack-parser-es']) want[t] = pkg.devDependencies[t]
for (const [name, spec] of Object.entries(want)) {
  const v = locked(name)
  if (spec.startsWith('npm:')) deps[name] = v && v.includes('@') ? `npm:${v}` : spec
  else deps[name] = v || spec
}
// vitest's vite, as the lock resolved it.
const vline = block.match(/\n {6}vitest:\n {8}specifier: [^\n]+\n {8}version: ([^\n]+)/)
const vite = vline && vline[1].match(/\(vite@([0-9.]+)/)
if (vite) deps.vite = vite[1]
console.log(JSON.stringify({ name: 'e2b-suite-deps', private: true, dependencies: deps }, null, 2))
EOF
key=$(cat "$manifest" | sha256sum | cut -c1-16)
modules=$cache/npm-e2bsuite-${commit:0:12}-$key
if [ ! -f "$modules/node_modules/.package-lock.json" ]; then
  echo "e2b-suite: npm install into $modules"
  mkdir -p "$cache"
  part=$(mktemp -d "$cache/npm-e2bsuite-partial-XXXXXX")
  cp "$manifest" "$part/package.json"
  (cd "$part" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null) || { rm -rf "$part"; exit 1; }
  rm -rf "$modules"
  mv "$part" "$modules"
fi
# The SDK resolves its packages from packages/js-sdk/node_modules.
if [ -e "$sdk/node_modules" ] && [ ! -L "$sdk/node_modules" ]; then
  echo "e2b-suite: $sdk/node_modules exists and is not this script's link; move it away" >&2
  exit 1
fi
ln -sfn "$modules/node_modules" "$sdk/node_modules"
if [ "$checkout" != "$tmp/E2B" ]; then
  trap 'rm -f "$sdk/node_modules" "$sdk/vitest.airlock.config.mts"; cleanup' EXIT
fi

# 3. The measurement (a Go test: it owns the namespaces, the server and
# their cleanup, as every integration test does).
if [ -z "$out" ]; then
  out=$(mktemp -d /tmp/e2b-suite-results.XXXXXX)
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "e2b-suite: E2B $commit, modes $modes, results in $out"
AIRLOCK_E2B_SUITE=$checkout AIRLOCK_E2B_SUITE_MODES=$modes AIRLOCK_E2B_SUITE_OUT=$out \
  AIRLOCK_E2B_SUITE_WORKERS=$workers AIRLOCK_E2B_SUITE_FILES=$files AIRLOCK_E2B_SUITE_MIN_PASS=$minpass \
  nice -n 19 go test ./integration/ -run 'TestE2BSuite$' -count=1 -v -timeout 120m \
  | grep -v '^=== \(RUN\|PAUSE\|CONT\)' || status=$?
echo "e2b-suite: results in $out (results.md, results-<mode>.json)"
exit "${status:-0}"
