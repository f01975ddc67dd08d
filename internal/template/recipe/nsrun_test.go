package recipe

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// TestBuildDoesNotPinHostMounts: a build's mount namespace starts with a
// copy of the host's mounts; a sandbox disk (a loop-mounted ext4) that the
// host unmounts while the build runs must be freed then, not when the build
// ends (a suspend or delete waits for its loop device). About a second.
func TestBuildDoesNotPinHostMounts(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "unshare")
	mkfs := airtest.RequireBinary(t, "mkfs.ext4")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The "sandbox disk", mounted on the host before the build starts.
	diskDir := t.TempDir()
	img := filepath.Join(diskDir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	mnt := filepath.Join(diskDir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount the disk: %v\n%s", err, out)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = exec.Command("umount", mnt).Run()
		}
		_ = rootfs.DetachLoopDevices(diskDir)
	})

	// A build helper holds its namespace open (a copy step waits for the
	// builder), with the disk's copy in it unless the helper dropped it.
	dir := t.TempDir()
	lower, upper, work, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var log strings.Builder
	h, _, err := startHelper(ctx, []string{lower}, upper, work, merged, nil, nil, &log)
	if err != nil {
		t.Fatalf("start the helper: %v\n%s", err, log.String())
	}
	defer h.wait()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", h.cmd.Process.Pid)); err != nil || strings.Contains(string(b), " "+mnt+" ") {
		t.Errorf("the build's namespace still holds the host's sandbox disk (%v):\n%s", err, b)
	}

	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("unmount the disk on the host: %v\n%s", err, out)
	}
	mounted = false
	deadline := time.Now().Add(5 * time.Second)
	for {
		devs, err := rootfs.LoopDevices(diskDir)
		if err == nil && len(devs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the disk's loop device is still bound while a build runs: %v, %v", devs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
