package vmdisk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// needTools skips the test when a program is missing, except in CI
// (CI=true), where that is a failure.
func needTools(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing (scripts/install-deps.sh installs it): %v", p, err)
			}
			t.Skipf("%s is missing (run scripts/install-deps.sh): %v", p, err)
		}
	}
}

// needRoot skips the test when not root, except in CI, where it fails.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test needs root (ownership, device nodes, loop mounts)")
		}
		t.Skip("this test needs root (ownership, device nodes, loop mounts)")
	}
}

func init() {
	// The tools this package runs come from sbin; tests find them the same way.
	os.Setenv("PATH", os.Getenv("PATH")+":/usr/local/sbin:/usr/sbin:/sbin")
}

// makeTree makes a small root filesystem tree with the things an image
// must keep.
func makeTree(t *testing.T) string {
	t.Helper()
	tree := filepath.Join(t.TempDir(), "tree")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"etc", "home/user", "tmp", "bin", "dev"} {
		must(os.MkdirAll(filepath.Join(tree, d), 0o755))
	}
	must(os.WriteFile(filepath.Join(tree, "etc/hostname"), []byte("sandbox\n"), 0o644))
	f := filepath.Join(tree, "home/user/secret")
	must(os.WriteFile(f, []byte("only user 1000\n"), 0o640))
	must(os.Chown(f, 1000, 1000))
	must(os.Chmod(f, 0o640))
	must(os.Chown(filepath.Join(tree, "home/user"), 1000, 1000))
	must(unix.Setxattr(f, "user.airlock", []byte("yes"), 0))
	must(os.Symlink("../home/user/secret", filepath.Join(tree, "etc/link")))
	must(os.Chmod(filepath.Join(tree, "tmp"), 0o777|fs.ModeSticky))
	su := filepath.Join(tree, "bin/su")
	must(os.WriteFile(su, []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(su, 0o755|fs.ModeSetuid))
	must(os.Link(su, filepath.Join(tree, "bin/su2")))
	must(unix.Mknod(filepath.Join(tree, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(os.Chmod(filepath.Join(tree, "dev/null"), 0o666)) // past the umask
	return tree
}

// countingHandler counts "built template image" records.
type countingHandler struct{ builds *atomic.Int32 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "built template image" {
		h.builds.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

func newImages(t *testing.T, dir string) (*Images, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	im, err := NewImages(dir, slog.New(countingHandler{&n}))
	if err != nil {
		t.Fatal(err)
	}
	return im, &n
}

// debugfs runs a debugfs request on an image, read-only.
func debugfs(t *testing.T, image, req string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", req, image).Output()
	if err != nil {
		t.Fatalf("debugfs %q: %v", req, err)
	}
	return string(out)
}

func sha(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestImageKeepsTheTree(t *testing.T) {
	needRoot(t)
	needTools(t, "mkfs.ext4", "debugfs", "e2fsck")
	tree := makeTree(t)
	im, _ := newImages(t, t.TempDir())
	start := time.Now()
	img, err := im.Image(context.Background(), "sha256:0123abcd", tree, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built a 1 GiB image of a small tree in %v", time.Since(start))
	if got := filepath.Base(img); got != "k-sha256_0123abcd-1073741824.ext4" {
		t.Errorf("image name %s", got)
	}
	st := stat(t, img)
	if st.Mode&0o7777 != 0o444 || st.Size != 1<<30 {
		t.Errorf("image mode %o size %d, want 0444 and 1 GiB", st.Mode&0o7777, st.Size)
	}
	if st.Blocks*512 > 64<<20 {
		t.Errorf("image allocates %d bytes: not sparse", st.Blocks*512)
	}
	if out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn: %v\n%s", err, out)
	}
	sb := debugfs(t, img, "stats")
	for _, want := range []string{"has_journal", "metadata_csum", "extent", "64bit"} {
		if !strings.Contains(sb, want) {
			t.Errorf("filesystem features lack %s", want)
		}
	}
	if strings.Contains(sb, "orphan_file") {
		t.Error("filesystem has orphan_file, which the guest kernel (6.1) mounts read-only")
	}
	for _, tc := range []struct {
		path string
		want []string // regexps on debugfs stat
	}{
		{"/home/user/secret", []string{`Type: regular\s+Mode:\s+0640\b`, `User:\s+1000\s+Group:\s+1000\b`, `user.airlock \(3\) = "yes"`}},
		{"/home/user", []string{`Type: directory`, `User:\s+1000\s+Group:\s+1000\b`}},
		{"/etc/link", []string{`Type: symlink`, `Fast link dest: "../home/user/secret"`}},
		{"/tmp", []string{`Type: directory\s+Mode:\s+01777\b`, `User:\s+0\s+Group:\s+0\b`}},
		{"/bin/su", []string{`Type: regular\s+Mode:\s+04755\b`, `Links: 2\b`}},
		{"/dev/null", []string{`Type: character special\s+Mode:\s+0666\b`, `Device major/minor number: 01:03`}},
	} {
		out := debugfs(t, img, "stat "+tc.path)
		for _, w := range tc.want {
			if !regexp.MustCompile(w).MatchString(out) {
				t.Errorf("%s: no %q in\n%s", tc.path, w, out)
			}
		}
	}
	if got := debugfs(t, img, "cat /home/user/secret"); got != "only user 1000\n" {
		t.Errorf("content %q", got)
	}
}

func TestImageCached(t *testing.T) {
	needRoot(t)
	needTools(t, "mkfs.ext4")
	tree := makeTree(t)
	dir := t.TempDir()
	im, builds := newImages(t, dir)
	ctx := context.Background()
	first, err := im.Image(ctx, "tmpl", tree, MinImageSize)
	if err != nil {
		t.Fatal(err)
	}
	st1 := stat(t, first)
	// Another Images on the same directory (another process, in effect).
	im2, builds2 := newImages(t, dir)
	for _, i := range []*Images{im, im2} {
		again, err := i.Image(ctx, "tmpl", "/nonexistent/tree/is/not/read/on/a/hit", MinImageSize)
		if err != nil || again != first {
			t.Fatalf("cache hit: %q, %v; want %q", again, err, first)
		}
	}
	st2 := stat(t, first)
	if st1.Ino != st2.Ino || st1.Mtim != st2.Mtim || builds.Load()+builds2.Load() != 1 {
		t.Errorf("rebuilt on a hit: inode %d→%d, mtime %v→%v, %d builds", st1.Ino, st2.Ino, st1.Mtim, st2.Mtim, builds.Load()+builds2.Load())
	}
	// Another size is another image; a size not a multiple of 4 KiB is rounded up.
	other, err := im.Image(ctx, "tmpl", tree, MinImageSize+1)
	if err != nil {
		t.Fatal(err)
	}
	if other == first || stat(t, other).Size != MinImageSize+BlockSize {
		t.Errorf("size %d: image %s of %d bytes", MinImageSize+1, other, stat(t, other).Size)
	}
}

func TestImageConcurrentCallersBuildOnce(t *testing.T) {
	needRoot(t)
	needTools(t, "mkfs.ext4")
	tree := makeTree(t)
	dir := t.TempDir()
	// Two Images on one directory: in-process locks and the flock together.
	imA, buildsA := newImages(t, dir)
	imB, buildsB := newImages(t, dir)
	// A leftover of a crashed build is removed, never returned.
	name := imageName("same", MinImageSize)
	leftover := filepath.Join(dir, name+imageExt+tmpMark+"crashed")
	if err := os.WriteFile(leftover, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	paths := make([]string, 16)
	errs := make([]error, 16)
	for i := range paths {
		wg.Go(func() {
			im := imA
			if i%2 == 1 {
				im = imB
			}
			paths[i], errs[i] = im.Image(context.Background(), "same", tree, MinImageSize)
		})
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("caller %d: %q, %v (caller 0: %q)", i, paths[i], errs[i], paths[0])
		}
	}
	if n := buildsA.Load() + buildsB.Load(); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("leftover of a crashed build still there: %v", err)
	}
	if len(imA.locks)+len(imB.locks) != 0 {
		t.Errorf("in-process locks left: %v %v", imA.locks, imB.locks)
	}
}

func TestImageErrors(t *testing.T) {
	needTools(t, "mkfs.ext4")
	tree := t.TempDir()
	// 80 MiB of data: too much for a 64 MiB image, fits in 128 MiB.
	if err := os.WriteFile(filepath.Join(tree, "big"), bytes.Repeat([]byte{1}, 80<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(tree, "big")
	ctxDone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		tree string
		size int64
		want string
	}{
		{"tree missing", context.Background(), filepath.Join(tree, "missing"), MinImageSize, "no such file or directory"},
		{"tree is a file", context.Background(), file, MinImageSize, "not a directory"},
		{"size below the minimum", context.Background(), tree, MinImageSize - 1, "below the minimum"},
		{"size too small for the tree", context.Background(), tree, MinImageSize, `too small for the tree, which takes 83\d{6} bytes \(2 inodes\); an ext4 image of it needs at least \d+ bytes`},
		{"context done", ctxDone, tree, 128 << 20, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			im, _ := newImages(t, dir)
			_, err := im.Image(tc.ctx, "key", tc.tree, tc.size)
			if err == nil || !regexp.MustCompile(tc.want).MatchString(err.Error()) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			t.Log(err)
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("left in the cache: %v", left)
			}
		})
	}
	// The tree fits once the size allows it.
	im, _ := newImages(t, t.TempDir())
	if _, err := im.Image(context.Background(), "key", tree, 128<<20); err != nil {
		t.Fatal(err)
	}
}

func TestImageNames(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want string // regexp
	}{
		{"sha256:abc", `^k-sha256_abc-4096$`},
		{"ubuntu-22.04", `^k-ubuntu-22.04-4096$`},
		{"a/b", `^h-[0-9a-f]{64}-4096$`},
		{"../../etc/passwd", `^h-[0-9a-f]{64}-4096$`},
		{"with space", `^h-[0-9a-f]{64}-4096$`},
		{"sha256_abc", `^h-[0-9a-f]{64}-4096$`}, // not the same file as sha256:abc
		{"x.ext4.tmp-1", `^h-[0-9a-f]{64}-4096$`},
		{".hidden", `^h-[0-9a-f]{64}-4096$`},
		{"", `^h-[0-9a-f]{64}-4096$`},
		{strings.Repeat("a", 101), `^h-[0-9a-f]{64}-4096$`},
	} {
		if got := imageName(tc.key, 4096); !regexp.MustCompile(tc.want).MatchString(got) {
			t.Errorf("imageName(%q) = %q, want %s", tc.key, got, tc.want)
		}
	}
	if imageName("a/b", 4096) == imageName("a/c", 4096) {
		t.Error("two keys hash to one name")
	}
}

func TestPrune(t *testing.T) {
	needRoot(t)
	needTools(t, "mkfs.ext4")
	tree := makeTree(t)
	dir := t.TempDir()
	im, _ := newImages(t, dir)
	ctx := context.Background()
	keep, err := im.Image(ctx, "keep", tree, MinImageSize)
	if err != nil {
		t.Fatal(err)
	}
	drop, err := im.Image(ctx, "odd/key", tree, MinImageSize)
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's file in the cache directory is left alone.
	if err := os.WriteFile(filepath.Join(dir, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A sidecar whose image never appeared (a crash) goes too.
	if err := os.WriteFile(filepath.Join(dir, "k-crashed-4096.json"), []byte(`{"key":"crashed"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := im.Prune(ctx, func(key string) bool { return key == "keep" })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != drop {
		t.Fatalf("removed %v, want [%s]", removed, drop)
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"README", "k-keep-67108864.ext4", "k-keep-67108864.json", "k-keep-67108864.lock"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("left %v, want %v", names, want)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Error(err)
	}
	// A pruned key is built again on demand.
	if again, err := im.Image(ctx, "odd/key", tree, MinImageSize); err != nil || again != drop {
		t.Errorf("rebuild: %q, %v", again, err)
	}
}

// TestImageAndCloneTimes times an image of a real tree (VMDISK_TREE, e.g.
// a ~100 MB root filesystem) and a clone of it; skipped without it.
func TestImageAndCloneTimes(t *testing.T) {
	tree := os.Getenv("VMDISK_TREE")
	if tree == "" {
		t.Skip("set VMDISK_TREE to a directory tree to time an image of it")
	}
	needRoot(t)
	needTools(t, "mkfs.ext4", "qemu-img")
	dir := t.TempDir()
	im, _ := newImages(t, dir)
	ctx := context.Background()
	ts, err := measureTree(ctx, tree)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	img, err := im.Image(ctx, "timed", tree, 2<<30)
	if err != nil {
		t.Fatal(err)
	}
	build := time.Since(start)
	start = time.Now()
	if _, err := im.Image(ctx, "timed", tree, 2<<30); err != nil {
		t.Fatal(err)
	}
	hit := time.Since(start)
	start = time.Now()
	if _, err := Clone(ctx, img, Raw, filepath.Join(dir, "clone")); err != nil {
		t.Fatal(err)
	}
	cl := time.Since(start)
	t.Logf("tree %d bytes, %d inodes: 2 GiB image built in %v (host %d bytes), cache hit %v, Clone %v",
		ts.bytes, ts.inodes, build, stat(t, img).Blocks*512, hit, cl)
}
