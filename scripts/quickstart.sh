#!/usr/bin/env bash
# Sets up a fresh Debian 12 host, starts `airlock server` in the background and
# runs a first command in a sandbox. Run as root from the repository.
#   AIRLOCK_DATA_DIR (default /var/lib/airlock), AIRLOCK_LISTEN (default 127.0.0.1:7070)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export PATH="/usr/local/go/bin:$PATH"
./scripts/build.sh

data_dir="${AIRLOCK_DATA_DIR:-/var/lib/airlock}"
listen="${AIRLOCK_LISTEN:-127.0.0.1:7070}"
mkdir -p "$data_dir"

healthy() {
  local url
  url=$(cat "$data_dir/server.url" 2>/dev/null) || return 1
  bin/airlock --data-dir "$data_dir" --timeout 2s sandbox list >/dev/null 2>&1 && [ -n "$url" ]
}

# The microVM environment's boot inputs (the pinned Debian guest kernel and
# an initramfs with the agent as init), content-addressed in the data dir;
# the server finds them there (--env qemu).
echo "quickstart: airlock env boot-inputs (microVM guest kernel and initramfs)"
bin/airlock --data-dir "$data_dir" env boot-inputs --uncompressed >/dev/null

if healthy; then
  echo "quickstart: airlock server already running at $(cat "$data_dir/server.url")"
else
  rm -f "$data_dir/server.url"
  echo "quickstart: starting airlock server (log: $data_dir/server.log)"
  nohup bin/airlock server --data-dir "$data_dir" --listen "$listen" --env runsc --env qemu >>"$data_dir/server.log" 2>&1 &
  for _ in $(seq 1 120); do
    healthy && break
    if ! kill -0 $! 2>/dev/null; then
      echo "quickstart: airlock server exited; last log lines:" >&2
      tail -n 20 "$data_dir/server.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  healthy || { echo "quickstart: server did not become ready; see $data_dir/server.log" >&2; exit 1; }
  echo "quickstart: airlock server running at $(cat "$data_dir/server.url") (pid $!)"
fi

# The default template (Debian 12 with python3, node, git…) is built in the
# background at the server's first start (a few minutes; cached afterwards):
# the first run waits for it, showing the build's progress.
echo "quickstart: airlock run -- python3 -c 'print(6*7)'"
bin/airlock --data-dir "$data_dir" run -- python3 -c 'print(6*7)'
# The same template in a microVM with its own kernel (KVM where it works,
# else emulated: a few seconds for the first, which also makes the base
# snapshot later creates restore).
echo "quickstart: airlock run --env qemu -- uname -r"
bin/airlock --data-dir "$data_dir" run --env qemu -- uname -r
cat <<MSG

Airlock is running. Try:
  bin/airlock --data-dir $data_dir run -- sh -c 'uname -a; id; ls /'
  bin/airlock --data-dir $data_dir run --template minimal -- busybox uname -a   # the busybox template
  bin/airlock --data-dir $data_dir run --env qemu -- sh -c 'uname -r; nproc'    # in a microVM
  bin/airlock --data-dir $data_dir build list                                   # template builds
  bin/airlock --data-dir $data_dir sandbox create        # keep one around
  bin/airlock --data-dir $data_dir exec SANDBOX_ID -- ps
Admin key: $data_dir/admin.key
Web console: $(cat "$data_dir/server.url")/ui/ (sign in with the admin key; docs/console.md)
MSG
