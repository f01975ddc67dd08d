package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
)

// requireLoop skips without root, mkfs.ext4 or loop devices.
func requireLoop(t *testing.T) {
	t.Helper()
	airtest.RequireRoot(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("needs loop devices: %v", err)
	}
}

// noLoopLeft fails the test if a loop device is still bound to a file under
// dir once it ends (after a short grace: a mount namespace that held the
// filesystem may be going away).
func noLoopLeft(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			devs, err := LoopDevices(dir)
			if err == nil && len(devs) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("loop devices left: %+v (%v)", devs, err)
				_ = DetachLoopDevices(dir)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func TestImageFillsUpToItsSize(t *testing.T) {
	requireLoop(t)
	ctx := context.Background()
	dir := t.TempDir()
	noLoopLeft(t, dir)
	image, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20
	start := time.Now()
	if err := MakeImage(ctx, image, size); err != nil {
		t.Fatal(err)
	}
	made := time.Now()
	if err := MountImage(image, mnt); err != nil {
		t.Fatal(err)
	}
	t.Logf("MakeImage %v, MountImage %v", made.Sub(start), time.Since(made))
	t.Cleanup(func() { _ = Unmount(ctx, nil, mnt) })
	if err := MakeImage(ctx, image, size); err == nil {
		t.Error("MakeImage over an existing file succeeded")
	}

	devs, err := LoopDevices(dir)
	if err != nil || len(devs) != 1 || devs[0].BackingFile != image {
		t.Fatalf("LoopDevices = %+v, %v; want one bound to %s", devs, err, image)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if total := int64(st.Blocks) * st.Bsize; total > size || total < size*9/10 {
		t.Errorf("statfs size = %d, want about %d", total, size)
	}

	f, err := os.Create(filepath.Join(mnt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var written int64
	for written < 2*size {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("write: %v, want ENOSPC", err)
			}
			break
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, unix.ENOSPC) {
		t.Errorf("fsync: %v", err)
	}
	f.Close()
	if written >= 2*size || written < size/2 {
		t.Errorf("wrote %d bytes into a %d-byte image", written, size)
	}
	var fi unix.Stat_t
	if err := unix.Stat(image, &fi); err != nil {
		t.Fatal(err)
	}
	if used := fi.Blocks * 512; used > size {
		t.Errorf("the image takes %d bytes on the host, more than its size %d", used, size)
	}

	if err := Unmount(ctx, nil, mnt); err != nil {
		t.Fatal(err)
	}
	// Autoclear frees the loop device with the unmount, a moment later.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if devs, err := LoopsReleased(wctx, dir); err != nil {
		t.Errorf("loop devices after unmount (autoclear): %+v, %v", devs, err)
	}
	if err := DetachLoopDevices(dir); err != nil {
		t.Errorf("DetachLoopDevices with none bound: %v", err)
	}
}

func TestDetachLoopDevices(t *testing.T) {
	requireLoop(t)
	ctx := context.Background()
	dir := t.TempDir()
	noLoopLeft(t, dir)
	image := filepath.Join(dir, "disk.img")
	if err := MakeImage(ctx, image, MinImageSize); err != nil {
		t.Fatal(err)
	}
	if err := MakeImage(ctx, filepath.Join(dir, "small.img"), MinImageSize-1); err == nil {
		t.Error("MakeImage below MinImageSize succeeded")
	}
	// A device bound without a mount, held open: what a process that died
	// without autoclear (or another tool) leaves.
	file, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	dev, loop, err := configureLoop(ctl, file, image)
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	if devs, err := LoopDevices(dir); err != nil || len(devs) != 1 || devs[0].Device != dev {
		t.Fatalf("LoopDevices = %+v, %v; want %s", devs, err, dev)
	}
	if err := DetachLoopDevices(dir); err != nil {
		t.Fatal(err)
	}
	loop.Close()
	if devs, err := LoopDevices(dir); err != nil || len(devs) != 0 {
		t.Fatalf("LoopDevices after detach = %+v, %v", devs, err)
	}
}

// TestOverlayHidesHostPaths: the mount table shows /proc/self/fd links, not
// the layers' host paths.
func TestOverlayHidesHostPaths(t *testing.T) {
	airtest.RequireRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	l := makeLayout(t, base)
	if err := MountOverlay(l.lower, l.upper, l.work, l.merged); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(ctx, nil, l.merged) })
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.MountPoint != l.merged {
			continue
		}
		if strings.Contains(m.SuperOptions, base) {
			t.Fatalf("overlay options show host paths: %q", m.SuperOptions)
		}
		return
	}
	t.Fatalf("%s not in mountinfo", l.merged)
}
