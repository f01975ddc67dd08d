#!/bin/sh
# vendor-xterm.sh — reproduce internal/console/assets/vendor/xterm/ from the
# npm registry: @xterm/xterm 6.0.0 and @xterm/addon-fit 0.11.0, packed with
# `npm pack`, checked against the sha256 sums below, and their ES module
# builds, stylesheet and licenses copied in. Run from the repository root;
# `git diff` afterwards shows nothing when the committed files are these.
set -eu

XTERM_VERSION=6.0.0
XTERM_SHA256=908e66e04af6c8dc6b00dd3b54de088e2e81e5ed866284fd6c2fb3c2d1c7a3f6
FIT_VERSION=0.11.0
FIT_SHA256=26003b4517a132b64e4ff228fd88a5fda3fff5e606c76093f6dcff772e9ecec0

dest=internal/console/assets/vendor/xterm
[ -d internal/console/assets ] || { echo "run from the repository root" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "@xterm/xterm@$XTERM_VERSION" "@xterm/addon-fit@$FIT_VERSION" >/dev/null)
echo "$XTERM_SHA256  $tmp/xterm-xterm-$XTERM_VERSION.tgz" | sha256sum -c -
echo "$FIT_SHA256  $tmp/xterm-addon-fit-$FIT_VERSION.tgz" | sha256sum -c -
mkdir -p "$tmp/xterm" "$tmp/fit"
tar xzf "$tmp/xterm-xterm-$XTERM_VERSION.tgz" -C "$tmp/xterm"
tar xzf "$tmp/xterm-addon-fit-$FIT_VERSION.tgz" -C "$tmp/fit"

rm -rf "$dest"
mkdir -p "$dest"
# The ES module builds without their source-map comment (the maps are not vendored).
sed '/^\/\/# sourceMappingURL=/d' "$tmp/xterm/package/lib/xterm.mjs" >"$dest/xterm.mjs"
sed '/^\/\/# sourceMappingURL=/d' "$tmp/fit/package/lib/addon-fit.mjs" >"$dest/addon-fit.mjs"
cp "$tmp/xterm/package/css/xterm.css" "$dest/xterm.css"
cp "$tmp/xterm/package/LICENSE" "$dest/LICENSE.xterm"
cp "$tmp/fit/package/LICENSE" "$dest/LICENSE.addon-fit"
printf '@xterm/xterm %s (sha256 of the npm tarball %s)\n@xterm/addon-fit %s (sha256 %s)\nReproduce with scripts/vendor-xterm.sh.\n' \
	"$XTERM_VERSION" "$XTERM_SHA256" "$FIT_VERSION" "$FIT_SHA256" >"$dest/VERSIONS"
echo "vendored into $dest"
