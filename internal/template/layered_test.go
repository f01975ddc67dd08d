package template

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// ImportLayered over a real overlay of a parent template: the template is
// the one a full copy makes; unchanged files are the parent's own inodes
// and are not read again; a file written, a file whose mode changed (both
// copied up, keeping the lower's inode number) and a new file are copied
// and hashed; the parent stays intact.
func TestImportLayered(t *testing.T) {
	s, tmp := newStore(t)
	ctx := context.Background()
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	buildTree(t, src, []node{
		{path: "same", kind: 'f', content: big},
		{path: "dir", kind: 'd'},
		{path: "dir/same2", kind: 'f', content: "unchanged"},
		{path: "dir/twin", kind: 'h', target: "same"},
		{path: "written", kind: 'f', content: "before"},
		{path: "chmodded", kind: 'f', content: "mode"},
		{path: "sneaky", kind: 'f', content: "same size"},
		{path: "link", kind: 'l', target: "same"},
	})
	parent, err := s.ImportDir(ctx, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The step: an overlay over the parent's tree, changed through it.
	upper, work, merged := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + s.RootfsDir(parent.Digest) + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("overlay mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(merged, "written"), []byte("after!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(merged, "chmodded"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(merged, "dir", "new"), []byte("new file"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Rewritten with the same size, mode, owner and modification time:
	// only the top layer (and the inode) tell it changed.
	sneaky := filepath.Join(merged, "sneaky")
	fi, err := os.Stat(sneaky)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sneaky, []byte("SAME SIZE"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(sneaky, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	want, _, err := templateOfTree(ctx, merged, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := s.ImportLayered(ctx, merged, upper, parent.Digest, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if imp.Digest != want.Digest {
		t.Fatalf("layered import made %s, a full copy %s", imp.Digest, want.Digest)
	}
	// same, dir/same2 (dir/twin is a link within the new tree) are linked;
	// written, chmodded, sneaky and dir/new are read: 6 + 4 + 9 + 8 bytes.
	if imp.LinkedFiles != 2 || imp.HashedBytes != 27 {
		t.Errorf("linked %d files, read %d bytes; want 2 and 27", imp.LinkedFiles, imp.HashedBytes)
	}
	ino := func(d model.TemplateDigest, rel string) uint64 {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(s.RootfsDir(d), rel), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	for _, rel := range []string{"same", "dir/same2", "dir/twin"} {
		if ino(imp.Digest, rel) != ino(parent.Digest, rel) {
			t.Errorf("%s is not the parent's inode", rel)
		}
	}
	for _, rel := range []string{"written", "chmodded", "sneaky"} {
		if ino(imp.Digest, rel) == ino(parent.Digest, rel) {
			t.Errorf("%s (changed) shares the parent's inode", rel)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(s.RootfsDir(imp.Digest), "written")); string(got) != "after!" {
		t.Errorf("written: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(s.RootfsDir(parent.Digest), "written")); string(got) != "before" {
		t.Errorf("the parent's file changed: %q", got)
	}
	for _, d := range []model.TemplateDigest{parent.Digest, imp.Digest} {
		if err := s.Verify(ctx, d); err != nil {
			t.Errorf("verify %s: %v", d, err)
		}
	}
	// A second step on the new template reads nothing it did not write.
	if err := unix.Unmount(merged, 0); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{upper, work} {
		if err := os.RemoveAll(d); err != nil || os.Mkdir(d, 0o755) != nil {
			t.Fatal(err)
		}
	}
	opts = "lowerdir=" + s.RootfsDir(imp.Digest) + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(merged, "third"), []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	imp2, err := s.ImportLayered(ctx, merged, upper, imp.Digest, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if imp2.LinkedFiles != 6 || imp2.HashedBytes != 1 {
		t.Errorf("second step: linked %d files, read %d bytes; want 6 and 1", imp2.LinkedFiles, imp2.HashedBytes)
	}
	// Without the memo (a restarted server) the layered import still
	// links, and reads what it links once.
	s.hashes.mu.Lock()
	s.hashes.m = nil
	s.hashes.mu.Unlock()
	if err := os.WriteFile(filepath.Join(merged, "fourth"), []byte("4"), 0o644); err != nil {
		t.Fatal(err)
	}
	imp3, err := s.ImportLayered(ctx, merged, upper, imp.Digest, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if imp3.LinkedFiles != 6 || imp3.HashedBytes < int64(len(big)) {
		t.Errorf("without the memo: linked %d files, read %d bytes", imp3.LinkedFiles, imp3.HashedBytes)
	}
}
