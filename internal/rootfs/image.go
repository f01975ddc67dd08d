package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ImageBlockSize is the block size of the ext4 filesystems MakeImage makes.
const ImageBlockSize = 4096

// MinImageSize is the smallest image MakeImage accepts.
const MinImageSize = 8 << 20

// mkfsTimeout bounds one mkfs.ext4 run when ctx has no earlier deadline.
const mkfsTimeout = 30 * time.Second

// MakeImage creates image, which must not exist, as a sparse file of size
// bytes holding an empty ext4 filesystem. Only metadata is written (a few
// hundred KiB): the file takes host disk space as the filesystem fills, and
// never more than size.
//
// The filesystem has no journal (a sandbox's writable layer does not outlive
// the host), no reserved blocks (the guest gets the whole size) and lazily
// initialised inode tables (mount it with "noinit_itable" so the kernel does
// not zero them in the background).
func MakeImage(ctx context.Context, image string, size int64) error {
	return makeImage(ctx, image, size, "^has_journal,^resize_inode,metadata_csum_seed")
}

// MakeJournaledImage is MakeImage with a journal: the filesystem of a
// volume, whose data outlives its sandboxes and must survive a crash of the
// host.
func MakeJournaledImage(ctx context.Context, image string, size int64) error {
	return makeImage(ctx, image, size, "^resize_inode,metadata_csum_seed")
}

func makeImage(ctx context.Context, image string, size int64, features string) error {
	if size < MinImageSize {
		return fmt.Errorf("make image %s: size %d is below the minimum of %d bytes", image, size, MinImageSize)
	}
	size = (size + ImageBlockSize - 1) / ImageBlockSize * ImageBlockSize
	f, err := os.OpenFile(image, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("make image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("make image %s: %w", image, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mkfsTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F",
		"-b", fmt.Sprint(ImageBlockSize),
		"-i", "16384", // one inode per 16 KiB, as mkfs's "default" type (small filesystems would get 4 KiB)
		"-m", "0",
		// metadata_csum_seed: checksums do not depend on the UUID, which
		// Images.Make gives every copy of a blank anew.
		"-O", features,
		"-E", "lazy_itable_init=1,nodiscard,root_owner=0:0",
		image)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", image, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// imageMountOptions are the ext4 options of a mounted image.
const imageMountOptions = "noinit_itable,errors=remount-ro"

// loopAttempts bounds the retries when another process takes the free loop
// device between LOOP_CTL_GET_FREE and LOOP_CONFIGURE.
const loopAttempts = 32

// MountImage attaches image (made by MakeImage) to a free loop device and
// mounts its ext4 filesystem at target (nosuid, nodev). The loop device is
// set to clear itself (LO_FLAGS_AUTOCLEAR) when its last user goes, so
// unmounting target frees it, and a process that dies before the mount
// leaves no device attached. It uses direct I/O to the image when the host
// filesystem allows it, so the data is not cached twice.
func MountImage(image, target string) error {
	file, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mount image: %w", err)
	}
	defer file.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mount image %s: %w", image, err)
	}
	defer ctl.Close()
	abs, err := filepath.Abs(image)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		dev, loop, err := configureLoop(ctl, file, abs)
		if errors.Is(err, unix.EBUSY) && attempt < loopAttempts {
			continue // raced with another user of the free device
		}
		if err != nil {
			return fmt.Errorf("mount image %s: %w", image, err)
		}
		err = unix.Mount(dev, target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, imageMountOptions)
		loop.Close() // the mount holds the device now; without it, autoclear frees it
		if err != nil {
			return fmt.Errorf("mount image %s (%s) on %s: %w", image, dev, target, err)
		}
		return nil
	}
}

// configureLoop binds file to a free loop device and returns its path and an
// open descriptor of it (which keeps it bound until closed or mounted).
func configureLoop(ctl, file *os.File, name string) (string, *os.File, error) {
	n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return "", nil, fmt.Errorf("find a free loop device: %w", err)
	}
	dev := fmt.Sprintf("/dev/loop%d", n)
	loop, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	cfg := unix.LoopConfig{Fd: uint32(file.Fd()), Size: ImageBlockSize}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], name)
	err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
	if errors.Is(err, unix.EINVAL) {
		// Direct I/O needs the host filesystem's support: cache instead.
		cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
	}
	if err != nil {
		loop.Close()
		return "", nil, fmt.Errorf("configure %s: %w", dev, err)
	}
	return dev, loop, nil
}

// LoopDevice is a loop device and the file it is bound to.
type LoopDevice struct {
	Device      string // /dev/loopN
	BackingFile string // as the kernel reports it; " (deleted)" once unlinked
}

// LoopsReleased waits until no loop device is bound to a file at or below
// dir, and returns those still bound when ctx ends. A loop device set to
// autoclear goes with the last unmount of its filesystem, but the kernel
// releases it a moment after the unmount returns (longer under load), so
// a check for leftovers right after an unmount or a delete waits here.
func LoopsReleased(ctx context.Context, dir string) ([]LoopDevice, error) {
	for {
		devs, err := LoopDevices(dir)
		if err == nil && len(devs) == 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return devs, err
			}
			return devs, fmt.Errorf("loop devices still bound under %s: %w", dir, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LoopDevices returns the loop devices bound to a file at or below dir
// (after resolving symlinks), also when the file has been deleted.
func LoopDevices(dir string) ([]LoopDevice, error) {
	path, err := canonical(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		path = filepath.Clean(dir) // gone: its devices show the old path, " (deleted)"
	}
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var out []LoopDevice
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // unbound meanwhile
		}
		backing := strings.TrimSuffix(string(b), "\n")
		file := strings.TrimSuffix(backing, " (deleted)")
		if file == path || strings.HasPrefix(file, strings.TrimSuffix(path, "/")+"/") {
			dev := filepath.Base(filepath.Dir(filepath.Dir(f)))
			out = append(out, LoopDevice{Device: "/dev/" + dev, BackingFile: backing})
		}
	}
	return out, nil
}

// DetachLoopDevices unbinds every loop device bound to a file at or below
// dir. Unmount what is mounted from them first: a device that is still in
// use (mounted, possibly in another mount namespace that is going away) is
// set to clear itself when its last user goes, and is not waited for.
func DetachLoopDevices(dir string) error {
	devs, err := LoopDevices(dir)
	if err != nil {
		return fmt.Errorf("detach loop devices: %w", err)
	}
	var errs []error
	for _, d := range devs {
		f, err := os.OpenFile(d.Device, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("detach %s (%s): %w", d.Device, d.BackingFile, err))
			}
			continue
		}
		err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.ENXIO) { // ENXIO: unbound meanwhile
			errs = append(errs, fmt.Errorf("detach %s (%s): %w", d.Device, d.BackingFile, err))
		}
	}
	return errors.Join(errs...)
}
