package runtimetest

import (
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// testDiskLimit plays a guest that fills its disk: a sandbox limited to
// 256 MiB writes 512 MiB. The write must fail with ENOSPC inside, the
// sandbox keep running and answering, the host not store more than the
// limit for it, and `df /` inside show the limit.
func testDiskLimit(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	res := defaultResources
	res.DiskBytes = 256 << 20
	spec := s.spec(res, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	stateDir := inspector(t, rt).Artifacts(spec.ID).StateDir

	// busybox df -k: Filesystem 1K-blocks Used Available Use% Mounted on
	out := sh(t, c, "df -k / | tail -n 1")
	fields := strings.Fields(out)
	if len(fields) < 4 {
		t.Fatalf("df -k / = %q", out)
	}
	totalKiB, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("df -k / = %q: %v", out, err)
	}
	if total := totalKiB << 10; total < res.DiskBytes*9/10 || total > res.DiskBytes*23/20 {
		t.Errorf("df / inside shows %d MiB, want about %d MiB (%q)", total>>20, res.DiskBytes>>20, out)
	}

	start := time.Now()
	dd := run(t, c, "dd", "if=/dev/zero", "of=/big", "bs=1M", "count=512")
	t.Logf("dd of 512 MiB into a 256 MiB disk: exit %d after %v: %s", dd.ExitCode, time.Since(start), strings.TrimSpace(string(dd.Stderr)))
	if dd.ExitCode == 0 || !strings.Contains(string(dd.Stderr), "No space left on device") {
		t.Fatalf("dd of 512 MiB into a 256 MiB disk: exit %d signal %q, stderr %q; want ENOSPC", dd.ExitCode, dd.Signal, dd.Stderr)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	if got := sh(t, c, "ls -l /big >/dev/null && echo alive"); got != "alive\n" {
		t.Fatalf("after ENOSPC: %q", got)
	}
	host := hostBytes(t, stateDir)
	if files := inspector(t, rt).Artifacts(spec.ID).DiskFiles; len(files) > 0 {
		host = 0
		for _, f := range files {
			var st syscall.Stat_t
			if err := syscall.Stat(f, &st); err != nil {
				t.Fatalf("the sandbox's disk file: %v", err)
			}
			host += st.Blocks * 512
		}
	}
	if host > res.DiskBytes+32<<20 {
		t.Errorf("the host stores %d MiB for a sandbox limited to %d MiB", host>>20, res.DiskBytes>>20)
	}
	// Space comes back once the guest frees it.
	if got := sh(t, c, "rm /big && echo more > /after && cat /after"); got != "more\n" {
		t.Fatalf("writing after freeing space: %q", got)
	}
	// /tmp is on the same disk (gVisor would otherwise keep an empty /tmp
	// in the sentry's memory: no ENOSPC, an OOM kill of the whole sandbox).
	dd = run(t, c, "dd", "if=/dev/zero", "of=/tmp/big", "bs=1M", "count=512")
	if dd.ExitCode == 0 || !strings.Contains(string(dd.Stderr), "No space left on device") {
		t.Fatalf("dd of 512 MiB into /tmp: exit %d signal %q, stderr %q; want ENOSPC", dd.ExitCode, dd.Signal, dd.Stderr)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	if got := sh(t, c, "rm /tmp/big && echo alive"); got != "alive\n" {
		t.Fatalf("after ENOSPC in /tmp: %q", got)
	}
}

// hostBytes is the disk space the files under dir take on the host's
// filesystem that holds dir, not counting other filesystems mounted below
// it (the sandbox's root and its own filesystem: their bytes are counted in
// their image files, if they have any).
func hostBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var root syscall.Stat_t
	if err := syscall.Stat(dir, &root); err != nil {
		t.Fatal(err)
	}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return total
}

// assertNoLoopDevices checks that no loop device is bound to a file under
// dir, allowing a mount namespace that still held the filesystem a moment
// to go away (the device then clears itself).
func assertNoLoopDevices(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		devs, err := rootfs.LoopDevices(dir)
		if err == nil && len(devs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("loop devices still bound under %s after Delete: %+v (%v)", dir, devs, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
