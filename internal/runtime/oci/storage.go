package oci

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs"
)

// MinDiskBytes is the smallest disk limit a sandbox may have.
const MinDiskBytes = 16 << 20

// metaSize is the room of the agent's run directory on the sandbox's
// filesystem (its socket): the tmpfs at dirs.meta without a disk limit, and
// what the disk image has beyond the limit.
const metaSize = 1 << 20

// prepareStorage sets up the sandbox's own filesystem at dirs.fs: with a
// disk limit, a fresh ext4 image of the limit (plus metaSize) loop-mounted
// there; without one, a directory, with a small tmpfs at dirs.meta for the
// agent's run directory. It then creates the overlay's upper and work
// directories and the run directory. The agent binary is not copied: every
// sandbox bind-mounts the runtime's shared agent filesystem's file
// (agentfs.go).
//
// With a user namespace (ids, runc and crun) the filesystem's root, the
// upper, work, meta and run directories belong to the sandbox's mapped root
// (see giveToRoot), which the runtime resolves the bind mounts as.
//
// keep (a restore) re-uses the sandbox's filesystem as Suspend left it: the
// existing image is mounted without a new filesystem, upper/ and work/ stay.
func (r *Runtime) prepareStorage(ctx context.Context, diskBytes int64, keep bool, dirs sandboxDirs, ids *rootfs.IDRange) error {
	if err := os.MkdirAll(dirs.fs, 0o700); err != nil {
		return err
	}
	switch {
	case diskBytes < 0:
		return fmt.Errorf("disk limit %d is negative", diskBytes)
	case diskBytes > 0 && diskBytes < MinDiskBytes:
		return fmt.Errorf("disk limit %d is below the minimum of %d bytes", diskBytes, MinDiskBytes)
	case diskBytes > 0:
		if !keep {
			if err := r.images.Make(ctx, dirs.image, diskBytes+metaSize); err != nil {
				return err
			}
		} else if !fileExists(dirs.image) {
			return fmt.Errorf("the sandbox's disk image %s is missing", dirs.image)
		}
		if err := rootfs.MountImage(dirs.image, dirs.fs); err != nil {
			return err
		}
		// mkfs.ext4 makes the root 0755 and host root's.
		if err := os.Chmod(dirs.fs, 0o700); err != nil {
			return err
		}
	}
	for _, d := range []string{dirs.upper, dirs.work, dirs.meta} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := giveToRoot(ids, dirs.fs, dirs.upper, dirs.work); err != nil {
		return err
	}
	if diskBytes == 0 {
		opts := fmt.Sprintf("mode=0700,size=%d,nr_inodes=64", metaSize)
		if ids != nil {
			opts += fmt.Sprintf(",uid=%d,gid=%d", ids.Host, ids.Host)
		}
		if err := unix.Mount("airlock-meta", dirs.meta, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", dirs.meta, err)
		}
	} else if err := giveToRoot(ids, dirs.meta); err != nil {
		return err
	}
	// The overlay root takes the mode of the upper dir: make it 0755 like a
	// normal root directory.
	if err := os.Chmod(dirs.upper, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(dirs.run, 0o700); err != nil {
		return err
	}
	return giveToRoot(ids, dirs.run)
}
