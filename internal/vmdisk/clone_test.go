package vmdisk

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/rootfs"
)

// baseImage builds a 64 MiB template image in dir.
func baseImage(t *testing.T, dir string) string {
	t.Helper()
	needTools(t, "mkfs.ext4", "qemu-img")
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "hello"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	im, _ := newImages(t, dir)
	img, err := im.Image(context.Background(), "base", tree, MinImageSize)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// qemuIO runs qemu-io commands on a disk of the given format.
func qemuIO(t *testing.T, format Format, disk string, cmds ...string) string {
	t.Helper()
	args := []string{"-f", string(format)}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("qemu-io", append(args, disk)...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "Pattern verification failed") || strings.Contains(string(out), "failed") {
		t.Fatalf("qemu-io %v: %v\n%s", cmds, err, out)
	}
	return string(out)
}

// writeAndCheck writes a pattern into disk and checks that it reads back
// and that the files below it are unchanged.
func writeAndCheck(t *testing.T, format Format, disk string, below ...string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-io"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("qemu-io is missing")
		}
		t.Log("qemu-io is missing: not writing into the clone")
		return
	}
	sums := map[string]string{}
	for _, b := range below {
		sums[b] = sha(t, b)
	}
	qemuIO(t, format, disk, "write -P 0xab 0 4k", "write -P 0xcd 1M 64k")
	qemuIO(t, format, disk, "read -P 0xab 0 4k", "read -P 0xcd 1M 64k")
	for _, b := range below {
		if got := sha(t, b); got != sums[b] {
			t.Errorf("writing into %s changed %s", disk, b)
		}
	}
}

func TestCloneQCOW2Chain(t *testing.T) {
	dir := t.TempDir()
	base := baseImage(t, dir)
	ctx := context.Background()
	mid := filepath.Join(dir, "mid.qcow2")
	start := time.Now()
	f, err := clone(ctx, base, Raw, mid, false)
	if err != nil || f != QCOW2 {
		t.Fatalf("clone raw base: %s, %v", f, err)
	}
	t.Logf("qcow2 clone in %v", time.Since(start))
	writeAndCheck(t, QCOW2, mid, base)
	// A clone of the (now frozen) clone: a base snapshot.
	if err := os.Chmod(mid, 0o444); err != nil {
		t.Fatal(err)
	}
	top := filepath.Join(dir, "top.qcow2")
	if f, err := Clone(ctx, mid, QCOW2, top); err != nil || f != QCOW2 {
		t.Fatalf("clone qcow2 base: %s, %v", f, err)
	}
	if st, err := os.Stat(top); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("clone mode: %v, %v", st, err)
	}
	writeAndCheck(t, QCOW2, top, base, mid)

	info, err := Info(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if info.Depth() != 3 {
		t.Fatalf("chain of depth %d: %+v", info.Depth(), info)
	}
	for i, want := range []struct {
		path   string
		format Format
	}{{top, QCOW2}, {mid, QCOW2}, {base, Raw}} {
		d := info
		for range i {
			d = *d.Backing
		}
		if d.Path != want.path || d.Format != want.format || d.VirtualSize != MinImageSize {
			t.Errorf("chain[%d] = %s %s %d, want %s %s %d", i, d.Path, d.Format, d.VirtualSize, want.path, want.format, MinImageSize)
		}
	}
	if info.Backing.Backing.ActualSize <= 0 || info.Backing.Backing.ActualSize >= MinImageSize {
		t.Errorf("base actual size %d: not sparse?", info.Backing.Backing.ActualSize)
	}
	// The guest's filesystem is whole through the chain.
	if out, err := exec.Command("qemu-img", "compare", "-f", "qcow2", "-F", "raw", top, base).CombinedOutput(); err == nil {
		t.Errorf("top and base compare equal after writes: %s", out)
	}
}

func TestCloneErrors(t *testing.T) {
	dir := t.TempDir()
	base := baseImage(t, dir)
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		base   string
		format Format
		dst    string
		want   string
	}{
		{"dst exists", base, Raw, existing, "file exists"},
		{"unknown format", base, "vmdk", filepath.Join(dir, "a"), `base format "vmdk"`},
		{"base missing", filepath.Join(dir, "missing"), Raw, filepath.Join(dir, "b"), "no such file"},
		{"base is a directory", dir, Raw, filepath.Join(dir, "c"), "not a regular file"},
		{"wrong base format", base, QCOW2, filepath.Join(dir, "d"), "qemu-img"},
		{"dst directory missing", base, Raw, filepath.Join(dir, "no/such/dir"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Clone(context.Background(), tc.base, tc.format, tc.dst)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			t.Log(err)
			if tc.dst == existing {
				if !errors.Is(err, fs.ErrExist) {
					t.Errorf("error %v does not wrap fs.ErrExist", err)
				}
				if b, _ := os.ReadFile(existing); string(b) != "keep me" {
					t.Errorf("existing dst changed: %q", b)
				}
			} else if _, err := os.Lstat(tc.dst); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("left at dst: %v", err)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".reflink-probe-*")); len(left) != 0 {
		t.Errorf("probe files left: %v", left)
	}
}

// On a filesystem without reflinks (ext4, tmpfs), Clone makes a qcow2
// overlay of a raw base.
func TestCloneFallsBackToQCOW2(t *testing.T) {
	dir := t.TempDir()
	base := baseImage(t, dir)
	ok, err := canReflink(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := QCOW2
	if ok {
		want = Raw
	}
	f, err := Clone(context.Background(), base, Raw, filepath.Join(dir, "clone"))
	if err != nil || f != want {
		t.Fatalf("Clone: %s, %v; want %s (reflinks: %v)", f, err, want, ok)
	}
}

// The reflink path, on an XFS filesystem with reflink=1 in a loop-mounted
// file.
func TestCloneReflinkXFS(t *testing.T) {
	needRoot(t)
	needTools(t, "mkfs.xfs", "mount", "umount", "filefrag", "e2fsck", "debugfs")
	tmp := t.TempDir()
	fsImage := filepath.Join(tmp, "xfs.img")
	mnt := filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fsImage, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(fsImage, 512<<20); err != nil { // mkfs.xfs wants >= 300 MiB
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.xfs", "-q", "-m", "reflink=1", fsImage).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v\n%s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", "-t", "xfs", fsImage, mnt).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount xfs: %v\n%s", err, out)
		}
		t.Skipf("cannot loop-mount XFS here: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v\n%s", err, out)
		}
		// The loop device goes with the unmount (autoclear), a moment
		// later under load.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if devs, err := rootfs.LoopsReleased(ctx, tmp); err != nil {
			t.Errorf("loop devices left: %v, %v", devs, err)
		}
	})
	dir := filepath.Join(mnt, "images")
	base := baseImage(t, dir)
	dst := filepath.Join(mnt, "sandbox.raw")
	start := time.Now()
	f, err := Clone(context.Background(), base, Raw, dst)
	if err != nil || f != Raw {
		t.Fatalf("Clone on XFS: %s, %v; want raw", f, err)
	}
	t.Logf("reflink clone in %v", time.Since(start))
	out, err := exec.Command("filefrag", "-v", dst).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "shared") {
		t.Errorf("clone's extents are not shared: %v\n%s", err, out)
	}
	info, err := Info(context.Background(), dst)
	if err != nil || info.Format != Raw || info.Backing != nil || info.VirtualSize != MinImageSize {
		t.Errorf("Info: %+v, %v", info, err)
	}
	writeAndCheck(t, Raw, dst, base)

	// The host kernel mounts a clone read-write, and the base stays as it was.
	baseSum := sha(t, base)
	rw := filepath.Join(mnt, "rw.raw")
	if f, err := Clone(context.Background(), base, Raw, rw); err != nil || f != Raw {
		t.Fatalf("Clone: %s, %v", f, err)
	}
	rwMnt := filepath.Join(tmp, "rw")
	if err := os.Mkdir(rwMnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop,rw", "-t", "ext4", rw, rwMnt).CombinedOutput(); err != nil {
		t.Fatalf("mount the clone: %v\n%s", err, out)
	}
	err = os.WriteFile(filepath.Join(rwMnt, "written"), []byte("by the guest"), 0o644)
	if out, uerr := exec.Command("umount", rwMnt).CombinedOutput(); uerr != nil {
		t.Fatalf("umount the clone: %v\n%s", uerr, out)
	}
	if err != nil {
		t.Fatalf("write into the mounted clone: %v", err)
	}
	if out, err := exec.Command("e2fsck", "-fn", rw).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn of the written clone: %v\n%s", err, out)
	}
	if got := debugfs(t, rw, "cat /written"); got != "by the guest" {
		t.Errorf("clone content %q", got)
	}
	if sha(t, base) != baseSum {
		t.Error("mounting and writing the clone changed the base")
	}
	if left, _ := filepath.Glob(filepath.Join(mnt, ".reflink-probe-*")); len(left) != 0 {
		t.Errorf("probe files left: %v", left)
	}
}
