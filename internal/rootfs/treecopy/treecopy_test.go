package treecopy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
)

// capValue is a revision 2 security.capability granting cap_net_raw.
var capValue = []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown, security.capability)")
	}
}

// makeTree writes a tree with a sparse file, a hard link pair, a file with
// a capability and a user xattr, a symlink, a setuid file and a fifo.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "etc/sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc/hosts"), []byte("127.0.0.1 localhost\n"), 0o644))
	must(os.Link(filepath.Join(dir, "etc/hosts"), filepath.Join(dir, "etc/sub/hosts-link")))
	f, err := os.Create(filepath.Join(dir, "sparse"))
	must(err)
	_, err = f.WriteAt([]byte("head"), 0)
	must(err)
	_, err = f.WriteAt([]byte("tail"), 64<<20)
	must(err)
	must(f.Truncate(128 << 20)) // trailing hole too
	must(f.Close())
	ping := filepath.Join(dir, "ping")
	must(os.WriteFile(ping, []byte("#!/bin/sh\n"), 0o755))
	must(os.Chown(ping, 0, 0))
	must(unix.Setxattr(ping, "security.capability", capValue, 0))
	must(unix.Setxattr(ping, "user.note", []byte("hello"), 0))
	must(os.Symlink("/etc/hosts", filepath.Join(dir, "link")))
	must(os.WriteFile(filepath.Join(dir, "suid"), []byte("x"), 0o644))
	must(os.Chown(filepath.Join(dir, "suid"), 1000, 1001))
	must(os.Chmod(filepath.Join(dir, "suid"), 0o4755|os.ModeSetuid))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
}

func checkCopy(t *testing.T, src, dst string) {
	t.Helper()
	var sp, dp unix.Stat_t
	if err := unix.Stat(filepath.Join(src, "sparse"), &sp); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(dst, "sparse"), &dp); err != nil {
		t.Fatal(err)
	}
	if dp.Size != sp.Size {
		t.Errorf("sparse file size %d, want %d", dp.Size, sp.Size)
	}
	// 128 MiB apparent size; the data is two small extents.
	if dp.Blocks*512 > 8<<20 {
		t.Errorf("sparse file copy allocates %d bytes; holes were filled", dp.Blocks*512)
	}
	got, err := os.ReadFile(filepath.Join(dst, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(src, "sparse"))
	if !bytes.Equal(got, want) {
		t.Error("sparse file content differs")
	}
	var a, b unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "etc/hosts"), &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(dst, "etc/sub/hosts-link"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link not kept: inodes %d and %d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(dst, "ping"), "security.capability", buf)
	if err != nil || !bytes.Equal(buf[:n], capValue) {
		t.Errorf("security.capability not kept: %x, %v", buf[:max(n, 0)], err)
	}
	n, err = unix.Getxattr(filepath.Join(dst, "ping"), "user.note", buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Errorf("user.note not kept: %q, %v", buf[:max(n, 0)], err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "/etc/hosts" {
		t.Errorf("symlink: %q, %v", target, err)
	}
	var s unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "suid"), &s); err != nil {
		t.Fatal(err)
	}
	if s.Mode&0o7777 != 0o4755 || s.Uid != 1000 || s.Gid != 1001 {
		t.Errorf("suid: mode %o owner %d:%d", s.Mode&0o7777, s.Uid, s.Gid)
	}
	var ss unix.Stat_t
	if err := unix.Lstat(filepath.Join(src, "suid"), &ss); err != nil {
		t.Fatal(err)
	}
	if s.Mtim != ss.Mtim {
		t.Errorf("suid mtime %v, want %v", s.Mtim, ss.Mtim)
	}
	if err := unix.Lstat(filepath.Join(dst, "fifo"), &s); err != nil || s.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("fifo: mode %o, %v", s.Mode, err)
	}
}

func TestTree(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	makeTree(t, src)
	dst := filepath.Join(t.TempDir(), "copy")
	st, err := treecopy.Tree(context.Background(), src, dst, treecopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCopy(t, src, dst)
	if st.Hardlinks != 1 {
		t.Errorf("Stats.Hardlinks = %d, want 1", st.Hardlinks)
	}
	if _, err := treecopy.Tree(context.Background(), src, dst, treecopy.Options{}); err == nil {
		t.Error("Tree into an existing directory succeeded")
	}
}

func TestTreeKeepXattr(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	makeTree(t, src)
	dst := filepath.Join(t.TempDir(), "copy")
	_, err := treecopy.Tree(context.Background(), src, dst, treecopy.Options{
		KeepXattr: func(name string) bool { return strings.HasPrefix(name, "security.") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(filepath.Join(dst, "ping"), "user.note", nil); err == nil {
		t.Error("user.note was copied although KeepXattr refused it")
	}
}

func TestFileCancelled(t *testing.T) {
	dir := t.TempDir()
	src, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	src.WriteString("data")
	dst, err := os.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := treecopy.File(ctx, dst, src, 4); err == nil {
		t.Error("File with a cancelled context succeeded")
	}
	if _, err := treecopy.File(context.Background(), dst, src, 5); err == nil {
		t.Error("File with the wrong size succeeded")
	}
}

// TestReflink copies on an XFS filesystem with reflinks (a loop image) and
// checks that the files were cloned, and that a copy across filesystems
// falls back to copying.
func TestReflink(t *testing.T) {
	requireRoot(t)
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("mkfs.xfs not installed: scripts/install-deps.sh installs xfsprogs")
		}
		t.Skip("mkfs.xfs not installed (apt-get install xfsprogs): reflink path not exercised")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "xfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(512 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(mkfs, "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.xfs -m reflink=1: %v: %s", err, out)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// mount -o loop allocates a loop device and frees it on umount.
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount an XFS loop image here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	src := filepath.Join(mnt, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	makeTree(t, src)
	st, err := treecopy.Tree(context.Background(), src, filepath.Join(mnt, "dst"), treecopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCopy(t, src, filepath.Join(mnt, "dst"))
	// sparse, hosts, ping, suid: every regular file with content.
	if st.Reflinked != 4 {
		t.Errorf("Stats.Reflinked = %d, want 4", st.Reflinked)
	}
	// Across filesystems (XFS to the temp dir): no reflink, holes kept.
	other := filepath.Join(t.TempDir(), "dst")
	st, err = treecopy.Tree(context.Background(), src, other, treecopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Reflinked != 0 {
		t.Errorf("Stats.Reflinked across filesystems = %d, want 0", st.Reflinked)
	}
	checkCopy(t, src, other)
}
