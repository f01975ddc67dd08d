#!/usr/bin/env bash
# Installs what Airlock needs on a Debian 12 host: the OCI runtimes (runc, crun,
# gVisor runsc), a static busybox for the minimal template, mmdebstrap for the
# Debian default template and recipes, QEMU (qemu-system-x86) for the microVM
# boot test, mkfs.ext4 for
# sandbox disk images, PostgreSQL's
# binaries, an S3 gateway (versitygw) and Chromium (driven by playwright-core
# in the web console's browser test) for the test suite, and Go; and sets
# kernel.pid_max as systemd does (the nodes' pids budget).
# Idempotent: fast when all is present.
# Run as root.
set -euo pipefail

RUNSC_VERSION="v0.0.0-20260905035102-160fafc42237" # gVisor, pinned
GO_VERSION="go1.26.8"
VERSITYGW_VERSION="v1.8.0" # S3 gateway for the blob store's tests, pinned (= internal/s3test.Version)

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: run as root (sudo $0)" >&2
  exit 1
fi

export PATH="/usr/local/go/bin:/usr/local/bin:$PATH"
export DEBIAN_FRONTEND=noninteractive

# python3-matplotlib and python3-pandas: the code interpreter's
# unit tests run its server with the host's python3 (charts and
# DataFrames), as the code-interpreter template has them.
packages=(runc crun busybox-static mmdebstrap bubblewrap util-linux e2fsprogs iproute2 xfsprogs postgresql gcc libc6-dev ca-certificates git qemu-system-x86 qemu-utils chromium python3-matplotlib python3-pandas)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! command -v go >/dev/null 2>&1; then
  # Debian's Go is older than Airlock needs; it only bootstraps the pinned
  # toolchain, which the go command fetches from the module proxy.
  missing+=(golang-go)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Use the pinned Go toolchain if the installed one is older.
have=$(go env GOVERSION)
if [ "$(printf '%s\n%s\n' "$GO_VERSION" "$have" | sort -V | head -n1)" != "$GO_VERSION" ]; then
  echo "install-deps: Go $have is older than $GO_VERSION; using GOTOOLCHAIN=$GO_VERSION"
  export GOTOOLCHAIN="$GO_VERSION"
  go version
fi

if ! command -v runsc >/dev/null 2>&1; then
  echo "install-deps: building gVisor runsc $RUNSC_VERSION (about a minute)"
  CGO_ENABLED=0 GOBIN=/usr/local/bin go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
fi

# The blob store's S3 tests run against versitygw, built from the module
# proxy into the version-keyed cache where internal/s3test looks for it.
# The cache is $AIRLOCK_TEST_CACHE when set (scripts/test.sh --fresh points
# it at an empty directory), else /var/cache/airlock-test (s3test.CacheDir for root).
vgw_dir="${AIRLOCK_TEST_CACHE:-/var/cache/airlock-test}/versitygw-$VERSITYGW_VERSION"
if [ ! -x "$vgw_dir/versitygw" ]; then
  echo "install-deps: building versitygw $VERSITYGW_VERSION for the S3 tests (about two minutes)"
  mkdir -p "$vgw_dir"
  vgw_tmp=$(mktemp -d "$vgw_dir/build-XXXXXX")
  (cd "$vgw_tmp" && CGO_ENABLED=0 GOFLAGS= GOWORK=off GOBIN="$vgw_tmp" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
  mv "$vgw_tmp/versitygw" "$vgw_dir/versitygw"
  rm -rf "$vgw_tmp"
fi

# The host's process table. Each node admits sandboxes while the sum of
# their host pids limits fits its pids budget, by default min(pid_max,
# threads-max) less a reserve for the host (docs/security.md). A host booted
# with systemd has kernel.pid_max=4194304 (systemd's 50-pid-max.conf); one
# without it keeps the kernel's 32768, which holds ~27 runc or ~6 runsc
# sandboxes of 256 MiB. Set it as systemd does, now and at boot.
pid_max_want=4194304
if [ "$(cat /proc/sys/kernel/pid_max)" -lt "$pid_max_want" ]; then
  if echo "$pid_max_want" > /proc/sys/kernel/pid_max 2>/dev/null; then
    echo "install-deps: kernel.pid_max raised to $pid_max_want (as systemd sets it)"
    mkdir -p /etc/sysctl.d
    echo "kernel.pid_max = $pid_max_want" > /etc/sysctl.d/50-airlock-pid-max.conf
  else
    echo "install-deps: cannot raise kernel.pid_max to $pid_max_want (read-only /proc/sys?): the nodes' pids budget stays small" >&2
  fi
fi

echo "install-deps: ok ($(go version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'), crun $(crun --version | awk 'NR==1{print $3}'), runsc at $(command -v runsc), versitygw $VERSITYGW_VERSION, $(chromium --version 2>/dev/null | head -n1))"
