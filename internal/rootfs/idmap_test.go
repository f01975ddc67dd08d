package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
)

func TestIDRangeValid(t *testing.T) {
	tests := []struct {
		r    IDRange
		want bool
	}{
		{IDRange{Host: 1 << 30, Size: 65536}, true},
		{IDRange{Host: 100000, Size: 1}, true},
		{IDRange{Host: 1 << 30, Size: 0}, false},
		{IDRange{Host: 1<<32 - 65536, Size: 65536}, false}, // would map 4294967295
		{IDRange{Host: 1<<32 - 65537, Size: 65536}, true},
	}
	for _, tt := range tests {
		if got := tt.r.Valid(); got != tt.want {
			t.Errorf("%s.Valid() = %v, want %v", tt.r, got, tt.want)
		}
	}
	if _, err := NewUserns(IDRange{Host: 1 << 30}); err == nil {
		t.Error("NewUserns accepted an empty range")
	}
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// TestMountOverlayIDMapped mounts an overlay over a root-owned lower
// directory seen through an idmapped mount: the lower files appear owned by
// the range's first id, a copy-up stores that id in the upper directory,
// the lower directory is untouched and no mount is left but the overlay.
func TestMountOverlayIDMapped(t *testing.T) {
	airtest.RequireRoot(t)
	for _, tt := range []struct {
		name        string
		tryDetached bool
	}{
		{"detached idmapped layer", true},
		{"idmapped layer attached while mounting", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testMountOverlayIDMapped(t, tt.tryDetached)
		})
	}
}

func testMountOverlayIDMapped(t *testing.T, tryDetached bool) {
	ctx := context.Background()
	r := IDRange{Host: 1<<30 + 7*65536, Size: 65536}
	base := t.TempDir()
	l := makeLayout(t, base)
	if err := os.WriteFile(filepath.Join(l.lower, "owned-by-1000"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(l.lower, "owned-by-1000"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(l.upper, int(r.Host), int(r.Host)); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(base, "scratch")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		t.Fatal(err)
	}
	userns, err := NewUserns(r)
	if err != nil {
		t.Fatal(err)
	}
	defer userns.Close()
	if err := mountOverlayIDMapped(ctx, nil, l.lower, scratch, l.upper, l.work, l.merged, userns, tryDetached); err != nil {
		t.Skipf("idmapped overlay layers unsupported here: %v", err)
	}
	t.Cleanup(func() {
		if err := Unmount(ctx, nil, l.merged); err != nil {
			t.Error(err)
		}
	})
	if mounts, err := MountsUnder(base); err != nil || len(mounts) != 1 || mounts[0] != l.merged {
		t.Fatalf("mounts under the test dir = %q, %v; want only the overlay", mounts, err)
	}
	for _, tt := range []struct {
		name     string
		uid, gid uint32
	}{
		{".", r.Host, r.Host}, // the upper dir's owner
		{"template.txt", r.Host, r.Host},
		{"owned-by-1000", r.Host + 1000, r.Host + 1000},
	} {
		if uid, gid := owner(t, filepath.Join(l.merged, tt.name)); uid != tt.uid || gid != tt.gid {
			t.Errorf("%s in the overlay owned by %d:%d, want %d:%d", tt.name, uid, gid, tt.uid, tt.gid)
		}
	}
	if err := os.WriteFile(filepath.Join(l.merged, "template.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(t, filepath.Join(l.upper, "template.txt")); uid != r.Host || gid != r.Host {
		t.Errorf("copied-up file owned by %d:%d in the upper dir, want %d:%d", uid, gid, r.Host, r.Host)
	}
	if uid, _ := owner(t, filepath.Join(l.lower, "template.txt")); uid != 0 {
		t.Errorf("the lower file's owner changed to %d", uid)
	}
	if got, err := os.ReadFile(filepath.Join(l.lower, "template.txt")); err != nil || string(got) != "from template\n" {
		t.Errorf("lower file = %q, %v", got, err)
	}
}
