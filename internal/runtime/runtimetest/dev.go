package runtimetest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/runtime"
)

// devWriteMiB is what testDevIsBounded writes: more than twice the
// sandbox's memory limit.
const devWriteMiB = 600

// testDevIsBounded plays a guest that fills the memory-backed
// filesystems it is given besides its disk: /dev and /dev/shm, 600 MB
// each into a 256 MiB sandbox. gVisor's /dev is a tmpfs of the sentry's
// that ignores size= (600 MB there OOM-killed the whole sandbox). Each
// write must fail inside (ENOSPC at the mount's bound, or EROFS where
// nothing may be written), within the sandbox's memory limit, and the
// sandbox keep running and answering.
func testDevIsBounded(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	for _, dir := range []string{"/dev", "/dev/shm"} {
		file := dir + "/airlock-fill"
		start := time.Now()
		dd, err := tryRun(t, c, "dd", "if=/dev/zero", "of="+file, "bs=1M", "count="+strconv.Itoa(devWriteMiB))
		if err != nil {
			st, serr := rt.State(ctxFor(t), spec.ID)
			t.Fatalf("dd of %d MiB into %s: %v after %v; the sandbox is now %+v (%v)", devWriteMiB, dir, err, time.Since(start), st, serr)
		}
		stderr := strings.TrimSpace(string(dd.Stderr))
		t.Logf("dd of %d MiB into %s: exit %d signal %q after %v: %s", devWriteMiB, dir, dd.ExitCode, dd.Signal, time.Since(start), stderr)
		if dd.ExitCode == 0 || !(strings.Contains(stderr, "No space left on device") || strings.Contains(stderr, "Read-only file system")) {
			t.Errorf("dd of %d MiB into %s: exit %d signal %q, stderr %q; want ENOSPC or EROFS", devWriteMiB, dir, dd.ExitCode, dd.Signal, stderr)
		}
		mustState(t, rt, spec.ID, runtime.PhaseRunning)
		// What the guest holds there now, in KiB (nothing: no file).
		held := sh(t, c, "if [ -e "+file+" ]; then du -k "+file+" | cut -f1; else echo 0; fi")
		if kib, err := strconv.ParseInt(strings.TrimSpace(held), 10, 64); err != nil {
			t.Fatalf("du -k %s: %q", file, held)
		} else if kib<<10 >= spec.Resources.MemoryBytes/2 {
			t.Errorf("the guest holds %d MiB in %s, half its memory limit or more", kib>>10, dir)
		}
		if got := sh(t, c, "rm -f "+file+" && echo alive"); got != "alive\n" {
			t.Fatalf("after filling %s: %q", dir, got)
		}
	}
	// The device nodes still work.
	if got := sh(t, c, "echo x > /dev/null && head -c 3 /dev/zero | wc -c"); strings.TrimSpace(got) != "3" {
		t.Errorf("/dev/null and /dev/zero after the fills: %q", got)
	}
}
