package rootfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// IDRange maps the ids [0, Size) of a user namespace onto the host ids
// [Host, Host+Size), for uids and gids alike.
type IDRange struct {
	Host uint32
	Size uint32
}

// Valid reports whether the range is non-empty and fits below the host's
// largest id (4294967295 is never a valid id).
func (r IDRange) Valid() bool {
	return r.Size > 0 && uint64(r.Host)+uint64(r.Size) <= 1<<32-1
}

func (r IDRange) String() string { return fmt.Sprintf("0:%d:%d", r.Host, r.Size) }

// NewUserns returns a descriptor of a new user namespace whose uid and gid
// maps are r. No process lives in it: the descriptor alone keeps it alive.
//
// A multithreaded process cannot unshare a user namespace, so, as runc
// does, a child is started in one with the maps written by this process;
// it is traced from its start, so it stops at its execve (of this very
// binary) without running any of it, and is killed once its namespace is
// open.
func NewUserns(r IDRange) (*os.File, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("new user namespace: invalid id range %s", r)
	}
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Host), Size: int(r.Size)}}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	proc, err := os.StartProcess("/proc/self/exe", []string{"airlock-userns"}, &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{devNull, devNull, devNull},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: m,
			GidMappings: m,
			Ptrace:      true, // stop at execve: nothing of the binary runs
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("new user namespace: start a process in it: %w", err)
	}
	defer func() {
		_ = proc.Kill()
		_, _ = proc.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid))
	if err != nil {
		return nil, fmt.Errorf("new user namespace: %w", err)
	}
	return f, nil
}

// MountIDMapped attaches at target a copy of the mount of the directory
// src (not of the mounts below it) in which every file's owner and group
// are shifted into userns: an id k on disk appears as the host id that k
// maps to in userns (with r = NewUserns(r), uid 0 on disk appears as
// r.Host). The copy is read-only and nosuid, nodev; target must exist. The
// filesystem of src must support idmapped mounts (ext4, xfs, btrfs, tmpfs,
// … on Linux 5.12 and later).
func MountIDMapped(src, target string, userns *os.File) error {
	return mountIDMapped(src, target, userns, unix.MOUNT_ATTR_RDONLY)
}

// MountIDMappedWritable is MountIDMapped without read-only: what the
// sandbox's ids write through it lands on disk under the ids they map
// back to (a volume's files, mounted into a user-namespaced sandbox).
func MountIDMappedWritable(src, target string, userns *os.File) error {
	return mountIDMapped(src, target, userns, 0)
}

func mountIDMapped(src, target string, userns *os.File, extra uint64) error {
	if !filepath.IsAbs(target) {
		return fmt.Errorf("idmapped mount of %s on %s: paths must be absolute", src, target)
	}
	tree, err := idmappedTreeWith(src, userns, extra)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	return attach(tree, src, target)
}

// idmappedTree returns a descriptor of a detached, idmapped, read-only copy
// of the mount of src (see MountIDMapped).
func idmappedTree(src string, userns *os.File) (int, error) {
	return idmappedTreeWith(src, userns, unix.MOUNT_ATTR_RDONLY)
}

// idmappedTreeWith is idmappedTree with extra mount attributes instead of
// read-only.
func idmappedTreeWith(src string, userns *os.File, extra uint64) (int, error) {
	if !filepath.IsAbs(src) {
		return -1, fmt.Errorf("idmapped mount of %s: path must be absolute", src)
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("idmapped mount: open_tree %s: %w", src, err)
	}
	attr := unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | extra | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns.Fd()),
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tree)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("idmapped mount of %s: the kernel or the filesystem does not support idmapped mounts: %w", src, err)
		}
		return -1, fmt.Errorf("idmapped mount of %s: mount_setattr: %w", src, err)
	}
	return tree, nil
}

func attach(tree int, src, target string) error {
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmapped mount of %s on %s: move_mount: %w", src, target, err)
	}
	return nil
}

// MountOverlayIDMapped mounts an overlayfs at target like MountOverlay, but
// its lower layer is lower seen through an idmapped mount (see
// MountIDMapped with userns), so the template's files appear owned by the
// ids they map to in userns. The upper and work directories keep the
// owners the caller gave them.
//
// Where the kernel takes a detached mount as an overlay layer (6.18 does),
// the idmapped view is never attached anywhere. Elsewhere (Linux 5.19 and
// later) it is attached at scratch (an empty directory) only while the
// overlay is mounted: overlayfs keeps its own private copy of each layer,
// so scratch is unmounted again before this returns (a crash in between
// leaves it mounted; MountsUnder finds it).
func MountOverlayIDMapped(ctx context.Context, logger *slog.Logger, lower, scratch, upper, work, target string, userns *os.File) error {
	return mountOverlayIDMapped(ctx, logger, lower, scratch, upper, work, target, userns, true)
}

// mountOverlayIDMapped is MountOverlayIDMapped; without tryDetached it
// goes straight to attaching the idmapped view at scratch (tests).
func mountOverlayIDMapped(ctx context.Context, logger *slog.Logger, lower, scratch, upper, work, target string, userns *os.File, tryDetached bool) error {
	if !filepath.IsAbs(scratch) {
		return fmt.Errorf("mount overlay: %q is not an absolute path", scratch)
	}
	tree, err := idmappedTree(lower, userns)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	detachedErr := errors.New("not tried")
	if tryDetached {
		if detachedErr = MountOverlay(fmt.Sprintf("/proc/self/fd/%d", tree), upper, work, target); detachedErr == nil {
			return nil
		}
	}
	if err := attach(tree, lower, scratch); err != nil {
		return errors.Join(detachedErr, err)
	}
	err = MountOverlay(scratch, upper, work, target)
	if uerr := Unmount(ctx, logger, scratch); uerr != nil {
		if err == nil {
			_ = Unmount(ctx, logger, target)
		}
		return errors.Join(err, uerr)
	}
	if err != nil {
		return fmt.Errorf("overlay with an idmapped lower layer (needs Linux 5.19 or later): %w (with the layer detached: %v)", err, detachedErr)
	}
	return nil
}
