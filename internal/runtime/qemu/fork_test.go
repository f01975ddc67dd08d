package qemu_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
)

// TestForkOutlivesItsSnapshot: a fork made from a live snapshot runs on
// once the snapshot is removed (as the server removes a fork's snapshot
// once its sandboxes are made), its QEMU is confined as every VM's (its
// own uid; every file it holds writable is its own or a sealed memfd, so
// the snapshot's RAM is shared copy-on-write, never written) and it can
// be suspended and woken afterwards, its process counting on; nothing of
// the helper VM that wrote the snapshot is left; a paused source is paused
// again after its snapshot.
func TestForkOutlivesItsSnapshot(t *testing.T) {
	e := newVMEnv(t)
	rt := e.runtime(t, false)
	ctx := ctxFor(t)
	t.Cleanup(func() {
		if uids, _ := os.ReadDir(filepath.Join(e.root, ".uids")); len(uids) != 1 {
			t.Errorf("uid reservations left in the state root: %d files", len(uids)-1)
		}
	})
	src := e.spec("source", nil)
	if err := rt.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Delete(ctxFor(t), src.ID); assertNoVM(t, rt, src.ID) })
	if err := rt.Start(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	c := client(t, rt, src.ID)
	sh(t, c, "echo kept > /kept.txt")
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"sh", "-c",
		"i=0; while :; do i=$((i+1)); echo $i > /n.new; mv /n.new /n; sleep 0.1; done"}}); err != nil {
		t.Fatal(err)
	}
	clients := map[model.SandboxID]*agentclient.Client{src.ID: c}
	counter := func(id model.SandboxID) int {
		t.Helper()
		if clients[id] == nil {
			clients[id] = client(t, rt, id)
		}
		out := sh(t, clients[id], "cat /n 2>/dev/null || echo 0")
		n, err := strconv.Atoi(out)
		if err != nil {
			t.Fatalf("counter of %s: %q", id, out)
		}
		return n
	}
	counting := func(id model.SandboxID) {
		t.Helper()
		n := counter(id)
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if counter(id) > n {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
		t.Fatalf("the counter of %s does not go on from %d", id, n)
	}
	counting(src.ID)

	dir := filepath.Join(t.TempDir(), "snp")
	t0 := time.Now()
	snap, err := rt.SnapshotRunning(ctx, src.ID, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SnapshotRunning: %v", time.Since(t0))
	if helpers, _ := os.ReadDir(filepath.Join(e.root, ".fork")); len(helpers) != 0 {
		t.Errorf("helper VM directories left: %v", helpers)
	}

	// A paused source is paused again after its snapshot.
	p := runtime.Pauser(rt)
	if err := p.Pause(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "snp-paused")
	if _, err := rt.SnapshotRunning(ctx, src.ID, dir2); err != nil {
		t.Fatalf("snapshot of a paused source: %v", err)
	}
	if st, err := rt.State(ctx, src.ID); err != nil || st.Phase != runtime.PhasePaused {
		t.Fatalf("a paused source after its snapshot: %+v, %v", st, err)
	}
	if err := p.Resume(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveSnapshot(ctx, dir2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir2); !os.IsNotExist(err) {
		t.Errorf("RemoveSnapshot left %s: %v", dir2, err)
	}

	fork := e.spec("fork", nil)
	fork.From = &snap
	t0 = time.Now()
	if err := rt.Create(ctx, fork); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Delete(ctxFor(t), fork.ID); assertNoVM(t, rt, fork.ID) })
	if err := rt.RemoveSnapshot(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	fc := client(t, rt, fork.ID)
	clients[fork.ID] = fc
	if got := sh(t, fc, "cat /kept.txt; hostname"); got != "kept\nfork" {
		t.Fatalf("the fork reads %q, want the source's file and its own hostname", got)
	}
	t.Logf("fork: Create + Start + first command: %v", time.Since(t0))
	counting(fork.ID)

	pid := rt.VMPid(fork.ID)
	uid := strings.Fields(procStatus(t, pid)["Uid"])
	srcUID := strings.Fields(procStatus(t, rt.VMPid(src.ID))["Uid"])
	if len(uid) != 4 || len(srcUID) != 4 || uid[0] == "0" || uid[0] == srcUID[0] {
		t.Errorf("the fork's QEMU runs as Uid %v (the source's %v): want a non-root uid of its own", uid, srcUID)
	}
	own := rt.StateDir(fork.ID) + "/"
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	memfds := 0
	for _, fd := range fds {
		p := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if strings.HasPrefix(target, "/memfd:") {
			memfds++
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
			f.Close()
			if err != nil || seals&unix.F_SEAL_WRITE == 0 {
				t.Errorf("the fork's RAM memfd %s is not sealed against writes (%#x, %v)", target, seals, err)
			}
			continue
		}
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		var flags int64
		for _, l := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "flags:"); ok {
				flags, _ = strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			}
		}
		if flags&unix.O_ACCMODE != unix.O_RDONLY && strings.HasPrefix(target, "/") && !strings.HasPrefix(target, own) && !strings.HasPrefix(target, "/dev/") {
			t.Errorf("the fork's QEMU holds %s open for writing", target)
		}
		if strings.HasPrefix(target, dir) {
			t.Errorf("the fork's QEMU holds the removed snapshot's %s", target)
		}
	}
	if memfds == 0 {
		t.Error("the fork's RAM is not the snapshot's sealed memfd")
	}

	// Suspended and woken after its snapshot is gone.
	fc.Close()
	delete(clients, fork.ID)
	susp, err := rt.Suspend(ctx, fork.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork.From, fork.Restore = nil, &susp
	if err := rt.Create(ctx, fork); err != nil {
		t.Fatalf("wake the fork after its snapshot was removed: %v", err)
	}
	if err := rt.Start(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	if got := counter(fork.ID); got <= 0 {
		t.Fatalf("the woken fork's counter reads %d", got)
	}
	if got := sh(t, clients[fork.ID], "cat /kept.txt"); got != "kept" {
		t.Fatalf("the woken fork reads %q", got)
	}
	counting(fork.ID)
	counting(src.ID)
	if st, err := rt.State(ctx, src.ID); err != nil || st.Phase != runtime.PhaseRunning {
		t.Fatalf("the source: %+v, %v", st, err)
	}
	if snap.Format != qemu.FormatFork || snap.Kind != model.SnapshotMemory {
		t.Errorf("snapshot %+v: want a memory snapshot in %s", snap, qemu.FormatFork)
	}
}

// TestProbeSweepsForkHelperLeftovers: the directory of a live snapshot's
// helper VM whose process is gone (a server that crashed mid-snapshot) is
// removed when the runtime starts (Probe); one of a live process stays.
func TestProbeSweepsForkHelperLeftovers(t *testing.T) {
	e := newVMEnv(t)
	rt := e.runtime(t, true)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(e.root, ".fork", fmt.Sprintf("fork-%d-0a0b0c0d0e0f", gone.Process.Pid))
	live := filepath.Join(e.root, ".fork", fmt.Sprintf("fork-%d-0a0b0c0d0e0f", os.Getpid()))
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "memory"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(live) })
	if err := rt.Probe(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead process's helper directory stays: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live process's helper directory was removed: %v", err)
	}
}
