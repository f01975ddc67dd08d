#!/usr/bin/env bash
# Makes sure Node.js and npm are on PATH in a version the E2B SDKs support
# (Node >= 20.18.1 on 20.x, or >= 22), for the E2B SDK test
# (integration/e2b_sdk_test.go, which `npm ci`s the pinned SDKs itself).
#
# Airlock's development and CI machines come with Node 20: then this only
# checks. On a bare Debian 12 it installs Debian's nodejs and npm; Debian's
# nodejs is 18, too old for the SDKs, so npm then installs Node's own
# linux build as shipped in the npm registry (package node-linux-<arch>,
# version pinned below) into $AIRLOCK_TEST_CACHE/node-v<version> and links
# it as /usr/local/bin/node (a wrapper that keeps trusting the system's
# CAs), ahead of /usr/bin on PATH.
# Idempotent: fast when all is present. Run as root.
set -euo pipefail

NODE_VERSION="20.20.2" # used only where the machine's Node is too old, pinned

if [ "$(id -u)" -ne 0 ]; then
  echo "install-node: run as root (sudo $0)" >&2
  exit 1
fi
export PATH="/usr/local/bin:$PATH"
export DEBIAN_FRONTEND=noninteractive

# node_ok: node runs and is a version the SDKs support (it checks itself).
node_ok() {
  command -v node >/dev/null 2>&1 && node -e '
    const [a, b, c] = process.versions.node.split(".").map(Number);
    process.exit((a === 20 && (b > 18 || (b === 18 && c >= 1))) || a >= 22 ? 0 : 1)'
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-node: installing Debian's nodejs and npm"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm ca-certificates >/dev/null
fi

if ! node_ok; then
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "install-node: no Node.js build for $(uname -m) in the npm registry" >&2; exit 1 ;;
  esac
  cache="${AIRLOCK_TEST_CACHE:-/var/cache/airlock-test}"
  dir="$cache/node-v$NODE_VERSION-$arch"
  bin="$dir/node_modules/node-linux-$arch/bin/node"
  if [ ! -x "$bin" ]; then
    echo "install-node: Node $(node --version) is too old for the E2B SDKs; installing node-linux-$arch@$NODE_VERSION from npm"
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/node-partial-XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    npm install --prefix "$tmp" --ignore-scripts --no-audit --no-fund --no-save "node-linux-$arch@$NODE_VERSION" >/dev/null
    rm -rf "$dir"
    mv "$tmp" "$dir"
    trap - EXIT
  fi
  # A wrapper, not a link: Node's own build trusts only the CAs it bundles,
  # Debian's nodejs the system's; keep the system's (e.g. a proxy's CA).
  rm -f /usr/local/bin/node
  cat >/usr/local/bin/node <<WRAPPER
#!/bin/sh
# Node.js $NODE_VERSION from npm's node-linux-$arch (scripts/install-node.sh),
# trusting the system's certificate authorities as Debian's nodejs does.
: "\${NODE_EXTRA_CA_CERTS:=/etc/ssl/certs/ca-certificates.crt}"
export NODE_EXTRA_CA_CERTS
exec "$bin" "\$@"
WRAPPER
  chmod 755 /usr/local/bin/node
  hash -r
  if ! node_ok; then
    echo "install-node: $(command -v node) is $(node --version) after the install" >&2
    exit 1
  fi
fi

echo "install-node: ok (node $(node --version) at $(command -v node), npm $(npm --version))"
