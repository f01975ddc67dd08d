package recipe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Steps that change a tree run in a helper: unshare(1) gives it new mount,
// PID, UTS and IPC namespaces (mount propagation private), and the script
// below mounts the overlay (the parent template's tree as the read-only
// lower, upper and work in the build's staging directory) and, for a run
// step, /proc, a minimal /dev, a /tmp tmpfs and the host's resolv.conf
// (read-only) in the merged tree; then it runs the command chrooted there,
// with the tree's environment. The helper itself runs with hostEnv: the
// host programs it runs are never looked up through the tree's PATH. Every mount
// lives in that namespace only: when the helper ends, however it ends,
// they are gone, and nothing is ever mounted on the host. After the command
// (or at once, for a copy step) the helper unmounts everything but the
// overlay, reports the exit status on fd 3 and waits for its stdin to
// close; meanwhile the builder reads (copy step: writes) the merged tree
// through /proc/<pid>/root.
const helperScript = dropForeignMounts + `set -eu
lower=$1 upper=$2 work=$3 merged=$4 mode=$5
shift 5
old_ifs=$IFS
IFS=:
# shellcheck disable=SC2086 # split the lower layers
drop_foreign_mounts $lower "$upper" "$work" "$merged"
IFS=$old_ifs
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$merged"
m=$merged
rc=0
plain_dir() { [ -d "$1" ] && [ ! -L "$1" ]; }
plain_file() { [ -f "$1" ] && [ ! -L "$1" ]; }
if [ "$mode" = run ]; then
	hostname airlock-build 2>/dev/null || true
	if plain_dir "$m/proc"; then mount -t proc -o nosuid,nodev,noexec proc "$m/proc"; fi
	if plain_dir "$m/dev"; then
		mount -t tmpfs -o mode=0755,nosuid,noexec,size=1m dev "$m/dev"
		for d in null zero full random urandom tty; do
			: >"$m/dev/$d"
			mount --bind "/dev/$d" "$m/dev/$d"
		done
		ln -s /proc/self/fd "$m/dev/fd"
		ln -s /proc/self/fd/0 "$m/dev/stdin"
		ln -s /proc/self/fd/1 "$m/dev/stdout"
		ln -s /proc/self/fd/2 "$m/dev/stderr"
		mkdir "$m/dev/shm" "$m/dev/pts"
	fi
	if plain_dir "$m/tmp"; then mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$m/tmp"; fi
	if plain_dir "$m/etc" && plain_file "$m/etc/resolv.conf" && [ -f /etc/resolv.conf ]; then
		mount --bind /etc/resolv.conf "$m/etc/resolv.conf"
		mount -o remount,bind,ro "$m/etc/resolv.conf"
	fi
	set +e
	# "$@" is env's: the command's environment, then chroot, the tree and
	# the command (see startHelper).
	"$@" </dev/null 3>&-
	rc=$?
	set -e
	kill -KILL -1 2>/dev/null || true
	for p in etc/resolv.conf tmp dev proc; do
		if mountpoint -q "$m/$p" 2>/dev/null; then umount -R -l "$m/$p"; fi
	done
fi
echo "$rc" >&3
exec 3>&-
cat >/dev/null
`

// dropForeignMounts defines the shell function drop_foreign_mounts, run
// first in a build's new mount namespace. The namespace starts with a copy
// of every mount of the host's, among them the disks (loop-mounted ext4)
// and root filesystems (overlays) of the sandboxes running then, and of
// other builds. Left there, a copy keeps its filesystem mounted, and a
// disk's loop device bound, for as long as the build runs, whatever the
// host unmounts meanwhile (an unmount does not reach a private copy): a
// sandbox suspended or deleted during a long build could not free its
// disk. The function unmounts those copies lazily, never / nor one that
// holds a path given as an argument (what the build itself uses).
const dropForeignMounts = `drop_foreign_mounts() {
	awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { print $5, $(i+1), $(i+2); break } }' /proc/self/mountinfo |
	while IFS=" " read -r mp fstype src; do
		case "$fstype:$src" in
		overlay:* | *:/dev/loop*) ;;
		*) continue ;;
		esac
		[ "$mp" = / ] && continue
		keep=0
		for p in "$@"; do
			case "$p/" in "$mp"/*) keep=1 ;; esac
		done
		[ "$keep" = 1 ] || umount -l "$mp" 2>/dev/null || true
	done
}
`

// hostPath is the PATH of the host programs the build runs.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostEnv is the environment of the host programs the build runs (the
// helper, mmdebstrap).
func hostEnv(extra ...string) []string {
	return append([]string{"PATH=" + hostPath, "HOME=/root", "LANG=C.UTF-8"}, extra...)
}

// lookHost finds a host program on hostPath.
func lookHost(name string) (string, error) {
	for _, dir := range filepath.SplitList(hostPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("the build needs %s on the host (%s)", name, hostPath)
}

// helper is a running helper.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	status *os.File
	log    *lineWriter
}

// startHelper starts the helper and waits until the merged tree is ready
// (copy) or the command has ended (run). It returns the command's exit
// status (0 for a copy step).
// lowers are the overlay's lower layers, the top one first.
func startHelper(ctx context.Context, lowers []string, upper, work, merged string, argv, env []string, log io.Writer) (*helper, int, error) {
	for _, p := range append([]string{upper, work}, lowers...) {
		if strings.ContainsAny(p, ",:\\\n") {
			return nil, 0, fmt.Errorf("overlay path %q contains a character overlayfs options cannot hold", p)
		}
	}
	lower := strings.Join(lowers, ":")
	mode := "hold"
	var run []string
	if len(argv) > 0 {
		mode = "run"
		envPath, err := lookHost("env")
		if err != nil {
			return nil, 0, err
		}
		chrootPath, err := lookHost("chroot")
		if err != nil {
			return nil, 0, err
		}
		// env -i sets exactly the tree's environment and runs chroot,
		// which runs the command: env reads NAME=VALUE words up to the
		// first without "=", chroot's path.
		run = append([]string{envPath, "-i"}, env...)
		for _, kv := range env {
			if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
				return nil, 0, fmt.Errorf("run step: bad environment entry %q", kv)
			}
		}
		run = append(append(run, chrootPath, merged), argv...)
	}
	args := append([]string{"--mount", "--pid", "--uts", "--ipc", "--fork", "--kill-child", "--propagation", "private",
		"--", "/bin/sh", "-c", helperScript, "airlock-build", lower, upper, work, merged, mode}, run...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = hostEnv()
	lw := &lineWriter{w: log}
	cmd.Stdout, cmd.Stderr = lw, lw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	cmd.ExtraFiles = []*os.File{statusW}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		return nil, 0, err
	}
	// Pdeathsig fires when the thread that started the child exits: keep
	// this goroutine on its thread until the helper is done (see wait).
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		statusR.Close()
		statusW.Close()
		return nil, 0, fmt.Errorf("start the build helper (unshare): %w", err)
	}
	statusW.Close()
	h := &helper{cmd: cmd, stdin: stdin, status: statusR, log: lw}
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	line, rerr := bufio.NewReader(statusR).ReadString('\n')
	stop()
	rc, perr := strconv.Atoi(strings.TrimSpace(line))
	if rerr != nil || perr != nil {
		werr := h.wait()
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("the build helper failed (%v)", errors.Join(werr, rerr))
	}
	return h, rc, nil
}

// merged returns the host path of the helper's view of path p.
func (h *helper) path(p string) string { return fmt.Sprintf("/proc/%d/root%s", h.cmd.Process.Pid, p) }

// wait lets the helper end (its namespaces and mounts go with it).
func (h *helper) wait() error {
	defer runtime.UnlockOSThread()
	h.stdin.Close()
	h.status.Close()
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	h.log.flush()
	return err
}

// lineWriter passes whole lines to w (one Write each), keeping a partial
// last line until it is complete or flushed. It is safe for concurrent use.
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.w.Write(l.buf[:i+1])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a very long line goes out in pieces
		l.w.Write(append(l.buf, '\n'))
		l.buf = nil
	}
	return len(p), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.w.Write(append(l.buf, '\n'))
		l.buf = nil
	}
}
