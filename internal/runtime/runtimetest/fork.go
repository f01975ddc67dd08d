package runtimetest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// liveSnapshotter returns rt's live snapshot methods, skipping the test
// when it does not claim CapLiveSnapshot.
func liveSnapshotter(t *testing.T, rt runtime.Runtime) runtime.LiveSnapshotter {
	t.Helper()
	if !rt.Info().Capabilities.Has(runtime.CapLiveSnapshot) {
		t.Skipf("%s does not claim %s", rt.Info().Name, runtime.CapLiveSnapshot)
	}
	ls, err := runtime.AsLiveSnapshotter(rt)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// testLiveSnapshotFork checks SnapshotRunning and Create with Spec.From on
// a runtime claiming CapLiveSnapshot: the snapshot leaves the source
// running (its counter goes on, what it writes afterwards stays its own);
// the snapshot is complete at its directory and nothing is left at its
// temporary name; a new sandbox made from it sees the file written before
// the snapshot, as its own root's (not the one written after), and, for a
// memory kind, the counter process from before running on from where it
// was (for a filesystem kind, not running: processes start again); what
// a fork writes stays its own; a second fork made after the source was
// deleted works too (the snapshot depends on nothing of it); a snapshot
// of another format is refused leaving nothing; RemoveSnapshot removes it
// and a fork from it is then refused.
func testLiveSnapshotFork(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	ls := liveSnapshotter(t, rt)
	ctx := ctxFor(t)
	memory := runtime.SnapshotKindOf(rt.Info().Capabilities) == model.SnapshotMemory
	dir := filepath.Join(t.TempDir(), "snp")
	if _, err := ls.SnapshotRunning(ctx, model.NewSandboxID(), dir); err == nil {
		t.Error("SnapshotRunning of an unknown sandbox succeeded")
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed snapshot left %s (%v)", dir, err)
	}

	src := s.spec(defaultResources, nil)
	s.started(t, rt, src)
	c := client(t, rt, src.ID)
	sh(t, c, "echo from-source > /forked.txt && rm /"+markerFile)
	counter := counterRunning(t, c)
	time.Sleep(500 * time.Millisecond)
	before := readCounter(t, c)

	start := time.Now()
	snap, err := ls.SnapshotRunning(ctx, src.ID, dir)
	if err != nil {
		t.Fatalf("SnapshotRunning: %v", err)
	}
	t.Logf("SnapshotRunning took %v: %+v", time.Since(start), snap)
	if want := runtime.SnapshotKindOf(rt.Info().Capabilities); snap.Kind != want {
		t.Errorf("snapshot kind = %q, want %q", snap.Kind, want)
	}
	if snap.Location != dir || snap.Format == "" || snap.SizeBytes <= 0 || snap.CreatedAt.IsZero() {
		t.Errorf("snapshot = %+v: want location %s, a format, a size and a time", snap, dir)
	}
	if _, err := os.Lstat(dir + runtime.SnapshotTempSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory left after SnapshotRunning (%v)", err)
	}
	if again, err := ls.SnapshotRunning(ctx, src.ID, dir); err != nil || again != snap {
		t.Errorf("SnapshotRunning into a complete snapshot = %+v, %v; want it again", again, err)
	}

	// The source runs on, untouched.
	mustState(t, rt, src.ID, runtime.PhaseRunning)
	c.Close()
	c = client(t, rt, src.ID)
	if ps, err := c.Status(ctx, counter); err != nil || !ps.Running {
		t.Fatalf("the source's counter after the snapshot: %+v, %v; want it running", ps, err)
	}
	atSnap := readCounter(t, c)
	waitFor(t, 10*time.Second, "the source's counter to go on", func() (bool, string) {
		n := readCounter(t, c)
		return n > atSnap, strconv.Itoa(n)
	})
	sh(t, c, "echo after > /after.txt")

	fork := s.spec(defaultResources, nil)
	fork.From = &snap
	start = time.Now()
	s.started(t, rt, fork)
	fc := client(t, rt, fork.ID)
	got := sh(t, fc, "cat /forked.txt; test -e /after.txt && echo after-leaked; test -e /"+markerFile+" || echo removed; stat -c %u /forked.txt")
	t.Logf("fork: Create + Start + first command took %v", time.Since(start))
	if got != "from-source\nremoved\n0\n" {
		t.Fatalf("files in the fork = %q; want the file written before the snapshot (owned by the fork's root), the removal kept and nothing written after", got)
	}
	ps, perr := fc.Status(ctx, counter)
	if memory {
		if perr != nil || !ps.Running {
			t.Fatalf("the counter in the fork: %+v, %v; want the source's process running on", ps, perr)
		}
		n := readCounter(t, fc)
		if n < before {
			t.Fatalf("the fork's counter is %d, below %d read before the snapshot", n, before)
		}
		waitFor(t, 10*time.Second, "the fork's counter to go on", func() (bool, string) {
			m := readCounter(t, fc)
			return m > n, strconv.Itoa(m)
		})
	} else if perr == nil && ps.Running {
		t.Fatalf("the counter runs in a filesystem fork: %+v", ps)
	}
	sh(t, fc, "echo fork-only > /fork-only.txt")
	if out := sh(t, c, "test -e /fork-only.txt && echo leaked; cat /forked.txt"); out != "from-source\n" {
		t.Fatalf("the source after the fork wrote: %q", out)
	}
	fc.Close()
	c.Close()

	// Independent of its source.
	s.deleteAndCheck(t, rt, src.ID)
	second := s.spec(defaultResources, nil)
	second.From = &snap
	s.started(t, rt, second)
	if got := sh(t, client(t, rt, second.ID), "cat /forked.txt; test -e /fork-only.txt && echo leaked; true"); got != "from-source\n" {
		t.Fatalf("a fork made after the source was deleted reads %q", got)
	}

	bad := s.spec(defaultResources, nil)
	other := snap
	other.Format += "-other"
	bad.From = &other
	if err := rt.Create(ctx, bad); err == nil {
		t.Error("Create from a snapshot of another format succeeded")
	}
	s.assertGone(t, rt, bad.ID)

	if err := ls.RemoveSnapshot(ctx, dir); err != nil {
		t.Fatalf("RemoveSnapshot: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("RemoveSnapshot left %s (%v)", dir, err)
	}
	if err := ls.RemoveSnapshot(ctx, dir); err != nil {
		t.Errorf("RemoveSnapshot of a removed snapshot: %v", err)
	}
	gone := s.spec(defaultResources, nil)
	gone.From = &snap
	if err := rt.Create(ctx, gone); err == nil || !strings.Contains(err.Error(), "no complete snapshot") {
		t.Errorf("Create from a removed snapshot = %v, want it refused", err)
	}
	s.assertGone(t, rt, gone.ID)
}
