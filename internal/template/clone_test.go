package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestClone: a clone of another store's template on the same filesystem is
// that template (same digest, a tree Verify accepts) whose regular files
// are the source's inodes, nothing copied; on another filesystem it is a
// copy. A source tree that no longer makes its digest is refused and
// leaves nothing published.
func TestClone(t *testing.T) {
	ctx := context.Background()
	src, _ := newStore(t)
	imp, err := src.ImportDir(ctx, makeSample(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ino := func(root, rel string) uint64 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, rel), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	check := func(t *testing.T, dst *Store, shared bool) {
		t.Helper()
		got, err := dst.Clone(ctx, src, imp.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest != imp.Digest || got.Reused || got.SizeBytes != imp.SizeBytes || got.Entries != imp.Entries {
			t.Fatalf("clone = %+v, want %+v", got, imp)
		}
		if err := dst.Verify(ctx, imp.Digest); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"bin/tool", "bin/suid", "etc/owned", "etc/empty"} {
			same := ino(src.RootfsDir(imp.Digest), rel) == ino(dst.RootfsDir(imp.Digest), rel)
			if same != shared {
				t.Errorf("%s: shares the source's inode: %v, want %v", rel, same, shared)
			}
		}
		if ino(dst.RootfsDir(imp.Digest), "bin/tool") != ino(dst.RootfsDir(imp.Digest), "bin/hard") {
			t.Error("bin/hard is not a hardlink of bin/tool in the clone")
		}
		again, err := dst.Clone(ctx, src, imp.Digest)
		if err != nil || !again.Reused || again.Digest != imp.Digest {
			t.Fatalf("second clone = %+v, %v; want it reused", again, err)
		}
		requireNoStaging(t, dst)
	}
	t.Run("same filesystem: linked", func(t *testing.T) {
		dst, _ := newStore(t)
		check(t, dst, true)
		// The source's tree is untouched by the clone (and by removing it).
		if err := src.Verify(ctx, imp.Digest); err != nil {
			t.Fatal(err)
		}
		if ok, err := dst.Remove(ctx, imp.Digest, func(context.Context) (bool, error) { return true, nil }); err != nil || !ok {
			t.Fatalf("remove the clone: %v %v", ok, err)
		}
		if err := src.Verify(ctx, imp.Digest); err != nil {
			t.Fatalf("the source after the clone was removed: %v", err)
		}
	})
	t.Run("another filesystem: copied", func(t *testing.T) {
		var fs syscall.Statfs_t
		if err := syscall.Statfs("/dev/shm", &fs); err != nil {
			t.Skipf("no /dev/shm: %v", err)
		}
		var here syscall.Stat_t
		var shm syscall.Stat_t
		if syscall.Stat(src.Dir(), &here) != nil || syscall.Stat("/dev/shm", &shm) != nil || here.Dev == shm.Dev {
			t.Skip("/dev/shm is on the source store's filesystem")
		}
		dir, err := os.MkdirTemp("/dev/shm", "clone-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		dst, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		check(t, dst, false)
	})
	t.Run("a source that no longer makes its digest", func(t *testing.T) {
		bad, _ := newStore(t)
		imp2, err := bad.ImportDir(ctx, makeSample(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(bad.RootfsDir(imp2.Digest), "etc/empty"), 0o666); err != nil {
			t.Fatal(err)
		}
		dst, _ := newStore(t)
		if _, err := dst.Clone(ctx, bad, imp2.Digest); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("clone of a tampered tree = %v, want ErrCorrupt", err)
		}
		requireEmptyStore(t, dst)
		if _, err := dst.Clone(ctx, bad, "sha256:0000000000000000000000000000000000000000000000000000000000000000"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("clone of a template the source lacks = %v, want ErrNotFound", err)
		}
	})
}
