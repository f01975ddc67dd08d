package oci

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs"
)

// MinDiskBytes is the smallest disk limit a sandbox may have.
const MinDiskBytes = 16 << 20

// metaSlack is what the agent's run directory may take on the sandbox's
// filesystem beyond the copy of the agent binary.
const metaSlack = 1 << 20

// prepareStorage sets up the sandbox's own filesystem at dirs.fs: with a
// disk limit, a fresh ext4 image of the limit (plus room for the agent's
// copy) loop-mounted there; without one, a directory, with a small tmpfs at
// dirs.meta for the agent's files. It then creates the overlay's upper and
// work directories and the run directory and copies the agent binary in.
//
// With a user namespace (ids, runc and crun) the filesystem's root, the
// upper, work, meta and run directories belong to the sandbox's mapped root
// (see giveToRoot), which the runtime resolves the bind mounts as; the
// agent's copy stays host root's, mode 0555.
func (r *Runtime) prepareStorage(ctx context.Context, diskBytes int64, agentBinary string, dirs sandboxDirs, ids *rootfs.IDRange) error {
	agentInfo, err := os.Stat(agentBinary)
	if err != nil || !agentInfo.Mode().IsRegular() {
		return fmt.Errorf("agent binary %q: not a regular file (%v)", agentBinary, err)
	}
	metaSize := roundUp(agentInfo.Size(), 1<<20) + metaSlack
	if err := os.MkdirAll(dirs.fs, 0o700); err != nil {
		return err
	}
	switch {
	case diskBytes < 0:
		return fmt.Errorf("disk limit %d is negative", diskBytes)
	case diskBytes > 0 && diskBytes < MinDiskBytes:
		return fmt.Errorf("disk limit %d is below the minimum of %d bytes", diskBytes, MinDiskBytes)
	case diskBytes > 0:
		if err := rootfs.MakeImage(ctx, dirs.image, diskBytes+metaSize); err != nil {
			return err
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
	if err := giveToRoot(ids, dirs.run); err != nil {
		return err
	}
	return copyFile(agentBinary, dirs.agent, 0o555)
}

// copyFile copies src to a new file dst with the given mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }
