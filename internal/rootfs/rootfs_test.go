package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/retry/retrytest"
)

type layout struct{ lower, upper, work, merged string }

func makeLayout(t *testing.T, base string) layout {
	t.Helper()
	l := layout{
		lower:  filepath.Join(base, "lower"),
		upper:  filepath.Join(base, "upper"),
		work:   filepath.Join(base, "work"),
		merged: filepath.Join(base, "merged"),
	}
	for _, d := range []string{l.lower, l.upper, l.work, l.merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(l.lower, "template.txt"), []byte("from template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestMountOverlay(t *testing.T) {
	airtest.RequireRoot(t)
	long := strings.Repeat("a-rather-long-directory-name-", 8) // 232 bytes per component
	tests := []struct {
		name string
		base func(t *testing.T) string
	}{
		{"short paths", func(t *testing.T) string { return t.TempDir() }},
		{"long paths beyond one page of options", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), long, long, long, long, long, long)
		}},
		{"special characters", func(t *testing.T) string { return filepath.Join(t.TempDir(), `a,b:c\d e`) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := makeLayout(t, tt.base(t))
			if err := MountOverlay(l.lower, l.upper, l.work, l.merged); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = Unmount(ctx, nil, l.merged) })
			if mounted, err := IsMounted(l.merged); err != nil || !mounted {
				t.Fatalf("IsMounted after mount = %v, %v", mounted, err)
			}
			got, err := os.ReadFile(filepath.Join(l.merged, "template.txt"))
			if err != nil || string(got) != "from template\n" {
				t.Fatalf("lower file through overlay = %q, %v", got, err)
			}
			if err := os.WriteFile(filepath.Join(l.merged, "template.txt"), []byte("changed\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(l.merged, "new.txt"), []byte("new\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(l.lower, "template.txt")); string(got) != "from template\n" {
				t.Fatalf("lower changed: %q", got)
			}
			if got, _ := os.ReadFile(filepath.Join(l.upper, "new.txt")); string(got) != "new\n" {
				t.Fatalf("upper/new.txt = %q", got)
			}
			under, err := MountsUnder(filepath.Dir(l.merged))
			if err != nil || len(under) != 1 {
				t.Fatalf("MountsUnder = %q, %v; want the one overlay", under, err)
			}
			if err := Unmount(ctx, nil, l.merged); err != nil {
				t.Fatal(err)
			}
			if mounted, err := IsMounted(l.merged); err != nil || mounted {
				t.Fatalf("IsMounted after unmount = %v, %v", mounted, err)
			}
			if err := Unmount(ctx, nil, l.merged); err != nil {
				t.Fatalf("second Unmount: %v", err)
			}
		})
	}
}

func TestUnmountStacked(t *testing.T) {
	airtest.RequireRoot(t)
	t.Parallel()
	ctx := context.Background()
	l := makeLayout(t, t.TempDir())
	for i := 0; i < 2; i++ {
		upper, work := l.upper+"-"+string(rune('0'+i)), l.work+"-"+string(rune('0'+i))
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := MountOverlay(l.lower, upper, work, l.merged); err != nil {
			t.Fatal(err)
		}
	}
	if under, _ := MountsUnder(l.merged); len(under) != 2 {
		t.Fatalf("MountsUnder = %q, want two stacked mounts", under)
	}
	if at, err := MountsAt(l.merged); err != nil || len(at) != 2 || at[0].FSType != "overlay" || at[0].ID == at[1].ID {
		t.Fatalf("MountsAt = %+v, %v; want the two overlays", at, err)
	}
	if err := Unmount(ctx, nil, l.merged); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := IsMounted(l.merged); mounted {
		t.Fatal("still mounted")
	}
}

func TestUnmountBusyDetachesLazily(t *testing.T) {
	airtest.RequireRoot(t)
	t.Parallel()
	ctx := context.Background()
	l := makeLayout(t, t.TempDir())
	if err := MountOverlay(l.lower, l.upper, l.work, l.merged); err != nil {
		t.Fatal(err)
	}
	// A mount below the overlay makes a plain umount fail with EBUSY.
	sub := filepath.Join(l.merged, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	l2 := makeLayout(t, t.TempDir())
	if err := MountOverlay(l2.lower, l2.upper, l2.work, sub); err != nil {
		t.Fatal(err)
	}
	clock := retrytest.NewClock()
	if err := unmount(ctx, nil, l.merged, clock); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := IsMounted(l.merged); mounted {
		t.Fatal("still mounted after lazy detach")
	}
	// It waited the busy backoff (5 ms doubling to 160 ms, ±20%) until
	// BusyTimeout passed on its clock, and no longer.
	var total time.Duration
	waits := clock.Waits()
	for i, d := range waits {
		base := min(5*time.Millisecond<<min(i, 10), 160*time.Millisecond)
		if d < base*4/5 || d > base*6/5+1 {
			t.Errorf("wait %d = %v, want %v ±20%%", i, d, base)
		}
		total += d
	}
	if total <= BusyTimeout || total-waits[len(waits)-1] > BusyTimeout {
		t.Errorf("waited %v in %d waits (%v), want just past %v", total, len(waits), waits, BusyTimeout)
	}
}

// TestIsMountedAgreesWithTheMountTable: the statx answer is the mount
// table's, for a directory mount, a file bind mount, a stacked mount, a
// plain directory and a symlink to a mount point.
func TestIsMountedAgreesWithTheMountTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := t.TempDir()
	mnt, plain, file, link := filepath.Join(dir, "mnt"), filepath.Join(dir, "plain"), filepath.Join(dir, "file"), filepath.Join(dir, "link")
	for _, d := range []string{mnt, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mnt, link); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, p := range []string{mnt, plain, file, link} {
			got, err := IsMounted(p)
			if err != nil {
				t.Fatalf("%s: IsMounted(%s): %v", when, p, err)
			}
			table, err := MountsAt(p)
			if err != nil {
				t.Fatal(err)
			}
			if got != (len(table) > 0) {
				t.Fatalf("%s: IsMounted(%s) = %v, the mount table has %d mounts there", when, p, got, len(table))
			}
		}
	}
	check("nothing mounted")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(file, file, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil { // stacked
		t.Fatal(err)
	}
	check("mounted")
	for _, p := range []string{mnt, file} {
		if err := Unmount(context.Background(), nil, p); err != nil {
			t.Fatal(err)
		}
	}
	check("unmounted")
}

func TestIsMountedMissingPath(t *testing.T) {
	mounted, err := IsMounted(filepath.Join(t.TempDir(), "does-not-exist"))
	if err != nil || mounted {
		t.Fatalf("IsMounted(missing) = %v, %v", mounted, err)
	}
	if mounted, err := IsMounted("/proc"); err != nil || !mounted {
		t.Fatalf("IsMounted(/proc) = %v, %v", mounted, err)
	}
	if at, err := MountsAt(filepath.Join(t.TempDir(), "does-not-exist")); err != nil || len(at) != 0 {
		t.Fatalf("MountsAt(missing) = %+v, %v", at, err)
	}
	if at, err := MountsAt("/proc"); err != nil || len(at) == 0 || at[len(at)-1].FSType != "proc" {
		t.Fatalf("MountsAt(/proc) = %+v, %v", at, err)
	}
}

func TestMountOverlayRejectsRelativePaths(t *testing.T) {
	if err := MountOverlay("lower", "/u", "/w", "/m"); err == nil {
		t.Fatal("relative lower accepted")
	}
}
