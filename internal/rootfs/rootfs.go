// Package rootfs prepares a sandbox's root filesystem on the host: an
// overlayfs whose lower layer is a template's read-only tree and whose upper
// and work directories belong to the sandbox, so a sandbox's writes never
// touch the template and two sandboxes never see each other's writes. For a
// sandbox in a user namespace the lower layer is an idmapped view of the
// template (MountOverlayIDMapped), so its files belong to the sandbox's
// root without a copy.
//
// Layers are passed as /proc/self/fd magic links of O_PATH descriptors, so
// mount tables show no host paths and paths may be long or contain
// characters overlayfs treats specially. A sandbox's own filesystem (its
// disk limit) is an ext4 image loop-mounted by MountImage.
package rootfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
)

// Source is the mount source name of every overlay this package mounts, so
// Airlock's mounts are recognisable in /proc/self/mountinfo.
const Source = "airlock"

// MountOverlay mounts an overlayfs at target with lower as its read-only
// lower layer and upper/work as its upper and work directories (which must be
// on the same filesystem). All four directories must exist.
//
// The layers are always passed as /proc/self/fd links of O_PATH
// descriptors, never as literal paths: the kernel (since 6.5) shows the
// option strings as given in every mount table that lists the overlay,
// including the sandbox's own /proc/self/mountinfo, so the guest reads
// "lowerdir=/proc/self/fd/7" instead of the host's data-dir paths. It also
// keeps long paths within mount(2)'s one-page data limit and needs no
// escaping of the characters overlayfs treats specially (',', ':', '\').
func MountOverlay(lower, upper, work, target string) error {
	dirs := []string{lower, upper, work, target}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("mount overlay: %q is not an absolute path", d)
		}
	}
	fds := make([]int, 0, len(dirs))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	links := make([]string, len(dirs))
	for i, d := range dirs {
		fd, err := openPath(d)
		if err != nil {
			return fmt.Errorf("mount overlay: %w", err)
		}
		fds = append(fds, fd)
		links[i] = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", links[0], links[1], links[2])
	if err := unix.Mount(Source, links[3], "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay on %s (lower %s, upper %s, work %s): %w", target, lower, upper, work, err)
	}
	return nil
}

func openPath(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	return fd, nil
}

// IsMounted reports whether target (after resolving symlinks) is a mount
// point in the calling process's mount namespace. It asks statx whether
// target is a mount's root (STATX_ATTR_MOUNT_ROOT, Linux ≥ 5.8): one
// system call instead of reading the mount table, which a host with many
// sandboxes makes long and every unmount of a delete used to read. Where
// the kernel does not report the attribute it reads the table.
func IsMounted(target string) (bool, error) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, target, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE, &st)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return false, nil
	case err == nil && st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0:
		return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	mounts, err := MountsAt(target)
	return len(mounts) > 0, err
}

// MountsAt returns the mounts whose mount point is target (after resolving
// symlinks), in mount order: the last one is on top. A missing target has
// none.
func MountsAt(target string) ([]mountinfo.Mount, error) {
	path, err := canonical(target)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []mountinfo.Mount
	for _, m := range mounts {
		if m.MountPoint == path {
			out = append(out, m)
		}
	}
	return out, nil
}

// MountsUnder returns the mount points at or below dir (after resolving
// symlinks), deepest first, so they can be unmounted in that order.
func MountsUnder(dir string) ([]string, error) {
	path, err := canonical(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []string
	prefix := strings.TrimSuffix(path, "/") + "/"
	for i := len(mounts) - 1; i >= 0; i-- { // later mounts stack on earlier ones
		mp := mounts[i].MountPoint
		if mp == path || strings.HasPrefix(mp, prefix) {
			out = append(out, mp)
		}
	}
	// Deepest first; among equal depths keep the reverse mount order.
	sortByDepth(out)
	return out, nil
}

func sortByDepth(paths []string) {
	// insertion sort: stable, lists are tiny
	for i := 1; i < len(paths); i++ {
		for j := i; j > 0 && strings.Count(paths[j], "/") > strings.Count(paths[j-1], "/"); j-- {
			paths[j], paths[j-1] = paths[j-1], paths[j]
		}
	}
}

func canonical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// BusyTimeout is how long Unmount retries a busy mount before it detaches
// it lazily.
const BusyTimeout = 2 * time.Second

// busyBackoff is how Unmount waits between tries of a busy mount: from
// 5 ms, doubling, at most 160 ms (±20%).
func busyBackoff() retry.Policy {
	return retry.Policy{Initial: 5 * time.Millisecond, Max: 160 * time.Millisecond, Jitter: 0.2}
}

// maxStacked bounds the unmount loop when mounts are stacked on one path.
const maxStacked = 64

// Unmount unmounts everything mounted at target (mounts may be stacked),
// retrying while the mount is busy. If it is still busy after BusyTimeout it
// lazily detaches it (MNT_DETACH) and logs a warning: the mount disappears
// from the namespace at once and the kernel frees it when its last user
// goes. Unmounting a path that is not a mount point (or does not exist) is a
// no-op. Paths must be shorter than PATH_MAX.
func Unmount(ctx context.Context, logger *slog.Logger, target string) error {
	return unmount(ctx, logger, target, retry.SystemClock())
}

// unmount is Unmount with the clock its busy retries wait on.
func unmount(ctx context.Context, logger *slog.Logger, target string, clock retry.Clock) error {
	if logger == nil {
		logger = slog.Default()
	}
	busy := busyBackoff().Start(clock)
	for unmounts := 0; ; {
		mounted, err := IsMounted(target)
		if err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		if !mounted {
			return nil
		}
		path, err := canonical(target)
		if err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		flags := 0
		lazy := busy.Elapsed() > BusyTimeout
		if lazy {
			flags = unix.MNT_DETACH
			logger.Warn("mount still busy; detaching it lazily", "target", path)
		}
		err = unix.Unmount(path, flags)
		switch {
		case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			// Unmounted (or someone else did); loop to catch stacked mounts.
			if unmounts++; unmounts > maxStacked {
				return fmt.Errorf("unmount %s: still mounted after %d unmounts (last error: %v)", path, unmounts, err)
			}
		case errors.Is(err, unix.EBUSY) && !lazy:
			if err := busy.Wait(ctx); err != nil {
				return fmt.Errorf("unmount %s: busy: %w", path, err)
			}
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
}
