package volumedisk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mounts)")
	}
}

// TestVolumeLifecycle: a volume is made on its first mount, keeps its data
// across an unmount, is bounded by its size (ENOSPC inside, the image no
// larger than the size outside) and leaves no mount, loop device or file
// once removed.
func TestVolumeLifecycle(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	m, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := model.NewVolumeID()
	const sizeMiB = 16
	t.Cleanup(func() { _ = m.Remove(context.Background(), id) })

	data, err := m.Mount(ctx, id, sizeMiB)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := m.Mount(ctx, id, sizeMiB); err != nil || again != data {
		t.Fatalf("second Mount = %q, %v; want %q", again, err, data)
	}
	if mounts, err := rootfs.MountsAt(filepath.Dir(data)); err != nil || len(mounts) != 1 {
		t.Fatalf("mounts at the volume's fs: %v, %v; want exactly one", mounts, err)
	}
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("data dir: %v, %v; want mode 0777", fi, err)
	}
	if err := os.WriteFile(filepath.Join(data, "keep"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Fill it: the write stops at ENOSPC, within the volume's size.
	f, err := os.Create(filepath.Join(data, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var written int64
	for {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write after %d bytes: %v, want ENOSPC", written, err)
			}
			break
		}
		if written > 2*sizeMiB<<20 {
			t.Fatalf("wrote %d bytes into a %d MiB volume", written, sizeMiB)
		}
	}
	f.Close()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, id.String(), "disk.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size > sizeMiB<<20 || st.Blocks*512 > sizeMiB<<20 {
		t.Fatalf("image is %d bytes (%d allocated), more than the volume's %d MiB", st.Size, st.Blocks*512, sizeMiB)
	}
	if used, total, ok, err := m.Usage(id); err != nil || !ok || used < written || total > sizeMiB<<20 {
		t.Fatalf("Usage = %d of %d, %v, %v; want at least %d used of at most %d MiB", used, total, ok, err, written, sizeMiB)
	}
	if err := os.Remove(filepath.Join(data, "fill")); err != nil {
		t.Fatal(err)
	}

	// Unmounted (as after a host reboot), mounted again: the data is there.
	if err := rootfs.Unmount(ctx, nil, filepath.Dir(data)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.Mounted(id); ok {
		t.Fatal("still mounted after unmount")
	}
	if data, err = m.Mount(ctx, id, sizeMiB); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "keep")); err != nil || string(b) != "kept" {
		t.Fatalf("after a remount: %q, %v", b, err)
	}
	if ids, err := m.List(); err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("List = %v, %v", ids, err)
	}

	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, id.String())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume directory after Remove: %v", err)
	}
	if left, err := rootfs.LoopsReleased(ctx, dir); err != nil {
		t.Fatalf("loop devices left: %v, %v", left, err)
	}
	if left, err := rootfs.MountsUnder(dir); err != nil || len(left) > 0 {
		t.Fatalf("mounts left: %v, %v", left, err)
	}
}

func TestRefusesBadInput(t *testing.T) {
	m, err := New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.Mount(ctx, "vol_../../etc", 16); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("Mount of a bad ID: %v", err)
	}
	if _, err := m.Mount(ctx, model.NewVolumeID(), 1); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("Mount of a tiny size: %v", err)
	}
	if err := m.Remove(ctx, "../x"); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("Remove of a bad ID: %v", err)
	}
	if _, err := New("relative", nil); err == nil {
		t.Fatal("New accepted a relative directory")
	}
}
