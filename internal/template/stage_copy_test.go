package template

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

var testCap = []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// A directory import copies through the copier: holes stay holes, kept
// xattrs (file capabilities, user.*) come along, others do not.
func TestImportDirKeepsHolesAndXattrs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (security.capability)")
	}
	s, _ := newStore(t)
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("x"), 16<<20)
	f.Close()
	tool := filepath.Join(src, "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]byte{"security.capability": testCap, "user.a": []byte("1"), "user.overlay.opaque": []byte("y")} {
		if err := unix.Setxattr(tool, name, v, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(src, "user.dir", []byte("d"), 0); err != nil {
		t.Fatal(err)
	}
	imp, err := s.ImportDir(context.Background(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := s.RootfsDir(imp.Digest)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 16<<20+1 || st.Blocks*512 > 1<<20 {
		t.Errorf("sparse: %d bytes, %d allocated", st.Size, st.Blocks*512)
	}
	buf := make([]byte, 64)
	for name, want := range map[string]string{"security.capability": string(testCap), "user.a": "1"} {
		n, err := unix.Getxattr(filepath.Join(root, "tool"), name, buf)
		if err != nil || string(buf[:n]) != want {
			t.Errorf("%s = %q, %v; want %q", name, buf[:max(n, 0)], err, want)
		}
	}
	if _, err := unix.Getxattr(filepath.Join(root, "tool"), "user.overlay.opaque", buf); err == nil {
		t.Error("user.overlay.opaque was kept")
	}
	if n, err := unix.Getxattr(root, "user.dir", buf); err != nil || string(buf[:n]) != "d" {
		t.Errorf("user.dir on the root = %q, %v", buf[:max(n, 0)], err)
	}
	if err := s.Verify(context.Background(), imp.Digest); err != nil {
		t.Fatal(err)
	}
	// The archive of the tree imports to the same template, holes and all.
	var arch bytes.Buffer
	if err := s.WriteArchive(context.Background(), imp.Digest, &arch); err != nil {
		t.Fatal(err)
	}
	s2, _ := newStore(t)
	again, err := s2.ImportArchive(context.Background(), &arch, imp.Digest, imp.Manifest, nil)
	if err != nil || again.Digest != imp.Digest {
		t.Fatalf("ImportArchive = %s, %v; want %s", again.Digest, err, imp.Digest)
	}
	if err := unix.Stat(filepath.Join(s2.RootfsDir(imp.Digest), "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 1<<20 {
		t.Errorf("sparse after the archive: %d allocated", st.Blocks*512)
	}
}

// ImportArchive publishes nothing when the archive makes another template.
func TestImportArchiveRefusesAnotherTree(t *testing.T) {
	s, _ := newStore(t)
	a, err := s.ImportTar(context.Background(), bytes.NewReader(makeTar(t, reg("a", "one"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	other := makeTar(t, reg("a", "two"))
	s2, _ := newStore(t)
	if _, err := s2.ImportArchive(context.Background(), bytes.NewReader(other), a.Digest, a.Manifest, nil); !isCorrupt(err) {
		t.Fatalf("ImportArchive of another tree: %v, want ErrCorrupt", err)
	}
	requireEmptyStore(t, s2)
	// A manifest that is not the digest's is refused before reading.
	if _, err := s2.ImportArchive(context.Background(), bytes.NewReader(other), a.Digest, append([]byte(nil), " "...), nil); !isCorrupt(err) {
		t.Fatalf("ImportArchive with a foreign manifest: %v, want ErrCorrupt", err)
	}
}

func isCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }
