package rootfs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Images made from one blank are each a sound ext4 filesystem (e2fsck finds
// nothing to fix) of their own identity (UUID, hash seed), as sparse as
// mkfs.ext4's, and mount; another size gets its own blank.
func TestImagesFromBlank(t *testing.T) {
	requireLoop(t)
	ctx := context.Background()
	dir := t.TempDir()
	noLoopLeft(t, dir)
	var m Images
	const size = 64 << 20
	var supers [][]byte
	for i, sz := range []int64{size, size, size, size + 8<<20} {
		image := filepath.Join(dir, "disk"+string(rune('a'+i))+".img")
		if err := m.Make(ctx, image, sz); err != nil {
			t.Fatal(err)
		}
		if err := m.Make(ctx, image, sz); err == nil {
			t.Error("Make over an existing file succeeded")
		}
		fi, err := os.Stat(image)
		if err != nil || fi.Size() != sz {
			t.Fatalf("%s: %v, %v; want %d bytes", image, fi, err, sz)
		}
		if e2fsck, err := exec.LookPath("e2fsck"); err == nil {
			if out, err := exec.Command(e2fsck, "-f", "-n", image).CombinedOutput(); err != nil {
				t.Fatalf("e2fsck -fn %s: %v\n%s", image, err, out)
			}
		}
		sb := make([]byte, superblockSize)
		f, err := os.Open(image)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.ReadAt(sb, superblockOffset)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		supers = append(supers, sb)
		mnt := filepath.Join(dir, "mnt"+string(rune('a'+i)))
		if err := os.Mkdir(mnt, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := MountImage(image, mnt); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600); err != nil {
			t.Error(err)
		}
		if err := Unmount(ctx, nil, mnt); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.blanks) != 2 || m.blanks[size] == nil || m.blanks[size+8<<20] == nil {
		t.Fatalf("blanks = %v, want one per size", m.blanks)
	}
	for i := range supers {
		for j := range i {
			for _, field := range [][2]int{{sbUUID, 16}, {sbHashSeed, 16}} {
				if bytes.Equal(supers[i][field[0]:][:field[1]], supers[j][field[0]:][:field[1]]) {
					t.Errorf("images %d and %d share the superblock field at %#x", i, j, field[0])
				}
			}
		}
	}
}
