package volumedisk

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/volumefs"
)

// TestContentAndIdleUnmount: the content API mounts a volume that no
// sandbox mounted, shares the mount with sandboxes (one mount, the same
// files), is bounded by the volume's size, and an idle volume is
// unmounted only when no call holds it and no sandbox uses it; a crash's
// staged file is swept at the next mount.
func TestContentAndIdleUnmount(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	id := model.NewVolumeID()
	t.Cleanup(func() { _ = m.Remove(context.Background(), id) })

	root, release, err := m.Content(ctx, id, 16)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := model.ParseVolumeFilePath("/dir/hello.txt")
	if _, err := root.WriteFile(p, strings.NewReader("hi"), volumefs.WriteOptions{MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	// What a sandbox binds is the same directory.
	data, err := m.Mount(ctx, id, 16)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "dir", "hello.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("the sandboxes' view: %q, %v", b, err)
	}
	// The volume's size bounds a write: ENOSPC inside, nothing left staged.
	big, _ := model.ParseVolumeFilePath("/big")
	_, err = root.WriteFile(big, io.LimitReader(zeros{}, 64<<20), volumefs.WriteOptions{MaxBytes: 1 << 30})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write larger than the volume: %v; want ENOSPC", err)
	}
	staging := filepath.Join(filepath.Dir(data), stagingDirName)
	if left, _ := os.ReadDir(staging); len(left) != 0 {
		t.Fatalf("staging keeps %d files after a failed write", len(left))
	}

	now := time.Now()
	noUsers := func(context.Context, model.VolumeID) (bool, error) { return false, nil }
	if got, err := m.UnmountIdle(ctx, 0, now.Add(time.Hour), noUsers); err != nil || len(got) != 0 {
		t.Fatalf("unmounted while a call holds it: %v, %v", got, err)
	}
	release()
	if got, err := m.UnmountIdle(ctx, time.Minute, time.Now(), noUsers); err != nil || len(got) != 0 {
		t.Fatalf("unmounted before the idle period: %v, %v", got, err)
	}
	used := func(context.Context, model.VolumeID) (bool, error) { return true, nil }
	if got, err := m.UnmountIdle(ctx, time.Minute, time.Now().Add(2*time.Minute), used); err != nil || len(got) != 0 {
		t.Fatalf("unmounted while a sandbox uses it: %v, %v", got, err)
	}
	// A crash mid-write leaves a staged file: swept at the next mount.
	if err := os.WriteFile(filepath.Join(staging, "upload-crashed"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := m.UnmountIdle(ctx, time.Minute, time.Now().Add(2*time.Minute), noUsers); err != nil || len(got) != 1 {
		t.Fatalf("idle volume not unmounted: %v, %v", got, err)
	}
	if _, ok, _ := m.Mounted(id); ok {
		t.Fatal("still mounted")
	}
	root, release, err = m.Content(ctx, id, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	f, _, err := root.OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "hi" {
		t.Fatalf("after a remount: %q", b)
	}
	if left, _ := os.ReadDir(staging); len(left) != 0 {
		t.Fatalf("a crash's staged file was not swept: %d left", len(left))
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
