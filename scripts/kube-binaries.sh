#!/usr/bin/env bash
# Builds etcd and kube-apiserver from the Go module proxy (tools/etcd and
# tools/kube pin them) into a version-keyed cache directory, and prints that
# directory. deploy/kubernetes/test runs them (KUBE_BIN_DIR) to server-side
# dry-run apply the manifests under deploy/kubernetes.
# Skips the build when the directory is already there. A cold build takes
# about 8 minutes on 2 cores (kube-apiserver is the long pole).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBE_VERSION="v1.35.4"  # = tools/kube/go.mod's k8s.io/kubernetes
ETCD_VERSION="v3.6.16"  # = tools/etcd/go.mod's go.etcd.io/etcd/server/v3

cache="${AIRLOCK_TEST_CACHE:-/var/cache/airlock-test}"
dir="$cache/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; then
  echo "$dir"
  exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.kube-build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The versions are those of the committed go.mod and go.sum files (-mod=readonly).
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
minor=${KUBE_VERSION#v1.}
minor=${minor%%.*}
ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
echo "kube-binaries: building etcd $ETCD_VERSION" >&2
(cd tools/etcd && go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
echo "kube-binaries: building kube-apiserver $KUBE_VERSION (about 7 minutes on a cold Go build cache)" >&2
(cd tools/kube && go build -trimpath -ldflags "$ld" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)

chmod 0755 "$tmp"
if ! mv -T "$tmp" "$dir" 2>/dev/null; then
  # Another build finished first; its result is as good as ours.
  [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ] || { echo "kube-binaries: cannot install into $dir" >&2; exit 1; }
fi
echo "$dir"
