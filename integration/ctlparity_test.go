package integration

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// TestControlParity runs on runc and runsc the control-plane pieces E2B
// parity needed, through a real server with its default --reap-interval
// (5 s):
//
//   - deadlines fire on a timer: several sandboxes with a short timeout are
//     being deleted one second after their deadline, which the former 5 s
//     poll missed most of the time (it acted 0-5 s late);
//   - metrics: the node samples each sandbox's CPU, memory and disk every
//     5 s; `airlock sandbox metrics` shows them, and they go with the
//     sandbox;
//   - suspend --keep-memory=false is honoured on runc (whose suspend keeps
//     only the filesystem) and on runsc (which then stops the sandbox
//     without a checkpoint): after the wake a file written before is there
//     and a background process started before is gone; --keep-memory is
//     honoured on runsc and refused with not_supported on runc;
//     --keep-memory=false on qemu keeps the disk and boots the VM again;
//   - a deadline's suspend keeps what the create said (timeout_keep_memory,
//     E2B's onTimeout pause with keepMemory false): only the filesystem on
//     runc and runsc, memory on runsc without it.
func TestControlParity(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			testControlParity(t, bins, rt)
		})
	}
	t.Run("qemu", func(t *testing.T) {
		airtest.RequireBinary(t, "runsc")
		requireQEMU(t)
		testControlParityQEMU(t, bins)
	})
}

// testControlParityQEMU: a VM's metrics (CPU from its VM cgroup, memory
// and disk from the guest agent) and a filesystem-only suspend (the disk
// kept, the VM booted again on wake).
func testControlParityQEMU(t *testing.T, bins binaries) {
	s := newServer(t, bins, serverConfig{extraArgs: qemuServerArgs(t)})
	s.start()
	ctx := ctxFor(t, 6*time.Minute)
	c := s.client()
	never := int64(0)
	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Environment: "qemu", IdleTimeout: &never})
	if _, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "sh", "-c", "dd if=/dev/zero of=/root/f bs=1M count=8 && sync"); code != 0 {
		t.Fatalf("exec: exit %d: %s", code, stderr)
	}
	var m apiv1.SandboxMetric
	for end := time.Now().Add(60 * time.Second); ; {
		list, err := c.SandboxMetrics(ctx, model.SandboxID(sb.ID), time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(list.Metrics); n > 0 {
			m = list.Metrics[n-1]
			break
		}
		if time.Now().After(end) {
			t.Fatal("no metrics of the VM 60 s after its create (see the server log for a usage warning)")
		}
		time.Sleep(time.Second)
	}
	t.Logf("VM sample: %+v", m)
	if m.MemUsed <= 0 || m.MemUsed > m.MemTotal || m.DiskTotal <= 0 || m.DiskUsed < 8<<20 || m.DiskUsed > m.DiskTotal || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
		t.Errorf("VM sample out of bounds: %+v", m)
	}
	// A filesystem-only suspend: the guest syncs, only the disk is kept,
	// the wake boots the VM again (the file is there, the boot is new).
	boot, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "cat", "/proc/sys/kernel/random/boot_id")
	if code != 0 {
		t.Fatalf("boot_id: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "suspend", sb.ID, "--keep-memory=false")
	if code != 0 {
		t.Fatalf("suspend --keep-memory=false on qemu: exit %d: %s", code, stderr)
	}
	var res apiv1.SandboxWithOperation
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Sandbox.Snapshot == nil || res.Sandbox.Snapshot.Kind != apiv1.SnapshotFilesystem {
		t.Fatalf("after suspend --keep-memory=false on qemu: %q, %v", stdout, err)
	}
	if _, stderr, code := s.cli(ctx, "sandbox", "wake", sb.ID); code != 0 {
		t.Fatalf("wake: exit %d: %s", code, stderr)
	}
	if out, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "sh", "-c", "wc -c < /root/f; cat /proc/sys/kernel/random/boot_id"); code != 0 || !strings.HasPrefix(out, "8388608\n") || strings.HasSuffix(out, boot) {
		t.Fatalf("after the wake (want the 8 MiB file and a new boot, not %q): exit %d: %q %s", boot, code, out, stderr)
	}
}

func testControlParity(t *testing.T, bins binaries, rt string) {
	s := newServer(t, bins, serverConfig{runtime: rt})
	s.start()
	ctx := ctxFor(t, 4*time.Minute)
	c := s.client()
	never := int64(0)

	t.Run("deadlines fire within a second", func(t *testing.T) {
		const n = 4
		var wg sync.WaitGroup
		errs := make(chan string, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Timeout: 3, IdleTimeout: &never})
				if sb.TimeoutAt == nil {
					errs <- sb.ID + ": no deadline"
					return
				}
				// From the deadline on, on this host's clock (the
				// server's), until one second after it: deleting or
				// deleted by then. The delay seen is logged.
				time.Sleep(time.Until(*sb.TimeoutAt))
				for {
					got, err := c.GetSandbox(ctx, model.SandboxID(sb.ID))
					if err != nil {
						errs <- sb.ID + ": " + err.Error()
						return
					}
					late := time.Since(*sb.TimeoutAt)
					if got.State == string(model.StateDeleting) || got.State == string(model.StateDeleted) {
						t.Logf("%s is %s %v after its deadline (seen by polling every 20 ms)", sb.ID, got.State, late.Round(time.Millisecond))
						return
					}
					if late > time.Second {
						errs <- sb.ID + " is " + got.State + " 1 s after its deadline"
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{IdleTimeout: &never, DiskMiB: 256})
		id := model.SandboxID(sb.ID)
		// Some CPU and a file on its disk.
		if _, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "sh", "-c", "dd if=/dev/zero of=/root/f bs=1M count=20 && i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"); code != 0 {
			t.Fatalf("exec: exit %d: %s", code, stderr)
		}
		var list apiv1.SandboxMetricList
		for end := time.Now().Add(30 * time.Second); len(list.Metrics) == 0; {
			if time.Now().After(end) {
				t.Fatal("no metrics 30 s after the create")
			}
			time.Sleep(time.Second)
			stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "metrics", sb.ID)
			if code != 0 {
				t.Fatalf("sandbox metrics: exit %d: %s", code, stderr)
			}
			if err := json.Unmarshal([]byte(stdout), &list); err != nil {
				t.Fatalf("decode %q: %v", stdout, err)
			}
		}
		m := list.Metrics[len(list.Metrics)-1]
		t.Logf("sample: %+v", m)
		switch {
		case m.CPUCount != 1 || m.MemTotal != int64(sb.MemoryMiB)<<20:
			t.Errorf("cpu_count %d mem_total %d, want 1 and %d MiB", m.CPUCount, m.MemTotal, sb.MemoryMiB)
		case m.MemUsed <= 0 || m.MemUsed > m.MemTotal:
			t.Errorf("mem_used %d of %d", m.MemUsed, m.MemTotal)
		case m.DiskTotal < 200<<20 || m.DiskTotal > 300<<20 || m.DiskUsed < 20<<20 || m.DiskUsed > m.DiskTotal:
			// The 256 MiB image less ext4's own metadata.
			t.Errorf("disk %d of %d, want at least the 20 MiB written of about 256 MiB", m.DiskUsed, m.DiskTotal)
		case m.CPUUsedPct < 0 || m.CPUUsedPct > 100:
			t.Errorf("cpu_used_pct %v", m.CPUUsedPct)
		}
		// The table form too.
		if stdout, _, code := s.cli(ctx, "sandbox", "metrics", sb.ID, "--since", "1m"); code != 0 || !strings.Contains(stdout, "MiB") {
			t.Errorf("sandbox metrics table: exit %d: %q", code, stdout)
		}
		// A range before the sandbox has none.
		old, err := c.SandboxMetrics(ctx, id, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
		if err != nil || len(old.Metrics) != 0 {
			t.Errorf("an hour ago: %+v, %v", old, err)
		}
		// Deleted: its samples go.
		if _, stderr, code := s.cli(ctx, "sandbox", "delete", sb.ID); code != 0 {
			t.Fatalf("delete: exit %d: %s", code, stderr)
		}
		s.waitState(ctx, id, model.StateDeleted)
		after, err := c.SandboxMetrics(ctx, id, time.Time{}, time.Time{})
		if err != nil || len(after.Metrics) != 0 {
			t.Errorf("after the delete: %d samples, %v", len(after.Metrics), err)
		}
	})

	t.Run("deadline keep-memory false", func(t *testing.T) {
		testDeadlineKeepMemory(ctx, t, s, rt)
	})

	t.Run("suspend keep-memory", func(t *testing.T) {
		sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{IdleTimeout: &never})
		if rt == "runc" {
			// runc's suspend keeps the filesystem only.
			_, stderr, code := s.cli(ctx, "sandbox", "suspend", sb.ID, "--keep-memory")
			if code == 0 || !strings.Contains(stderr, "not_supported") || !strings.Contains(stderr, "keep_memory true") {
				t.Fatalf("suspend --keep-memory on runc: exit %d: %s", code, stderr)
			}
			if got, err := c.GetSandbox(ctx, model.SandboxID(sb.ID)); err != nil || got.State != string(model.StateRunning) {
				t.Fatalf("after the refused suspend: %+v, %v", got.State, err)
			}
		}
		if _, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "sh", "-c", "echo kept > /root/fs-kept.txt"); code != 0 {
			t.Fatalf("write the file: exit %d: %s", code, stderr)
		}
		if _, stderr, code := s.cli(ctx, "exec", "--detach", sb.ID, "--", "sleep", "600"); code != 0 {
			t.Fatalf("start the background process: exit %d: %s", code, stderr)
		}
		if out, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "ps", "-eo", "args"); code != 0 || !strings.Contains(out, "sleep 600") {
			t.Fatalf("the background process before the suspend: exit %d: %s%s", code, out, stderr)
		}
		stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "suspend", sb.ID, "--keep-memory=false")
		if code != 0 {
			t.Fatalf("suspend --keep-memory=false: exit %d: %s", code, stderr)
		}
		var res apiv1.SandboxWithOperation
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("decode %q: %v", stdout, err)
		}
		if res.Sandbox.State != string(model.StateSuspended) || res.Sandbox.Snapshot == nil || res.Sandbox.Snapshot.Kind != apiv1.SnapshotFilesystem {
			t.Fatalf("after suspend --keep-memory=false: %s, snapshot %+v", res.Sandbox.State, res.Sandbox.Snapshot)
		}
		if _, stderr, code := s.cli(ctx, "sandbox", "wake", sb.ID); code != 0 {
			t.Fatalf("wake: exit %d: %s", code, stderr)
		}
		if out, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "cat", "/root/fs-kept.txt"); code != 0 || out != "kept\n" {
			t.Fatalf("the file after the wake: exit %d: %q %s", code, out, stderr)
		}
		if out, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "ps", "-eo", "args"); code != 0 || strings.Contains(out, "sleep 600") {
			t.Fatalf("processes after a filesystem-only suspend and wake (sleep 600 must be gone): exit %d: %s%s", code, out, stderr)
		}
		if rt == "runsc" {
			// The default suspend still keeps memory: the process goes on.
			if _, stderr, code := s.cli(ctx, "exec", "--detach", sb.ID, "--", "sleep", "601"); code != 0 {
				t.Fatalf("start the background process: exit %d: %s", code, stderr)
			}
			stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "suspend", sb.ID, "--keep-memory")
			if code != 0 {
				t.Fatalf("suspend --keep-memory: exit %d: %s", code, stderr)
			}
			var res apiv1.SandboxWithOperation
			if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Sandbox.Snapshot == nil || res.Sandbox.Snapshot.Kind != apiv1.SnapshotMemory {
				t.Fatalf("after suspend --keep-memory: %q, %v", stdout, err)
			}
			if _, stderr, code := s.cli(ctx, "sandbox", "wake", sb.ID); code != 0 {
				t.Fatalf("wake: exit %d: %s", code, stderr)
			}
			if out, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "ps", "-eo", "args"); code != 0 || !strings.Contains(out, "sleep 601") {
				t.Fatalf("processes after a memory suspend and wake (sleep 601 must run): exit %d: %s%s", code, out, stderr)
			}
		}
	})
}

// testDeadlineKeepMemory: sandboxes whose deadline suspends them, one
// asking to keep only the filesystem (timeout_keep_memory false) and, on
// runsc, one asking nothing (its runtime's suspend keeps memory): each has
// a file written and a background process started before its deadline;
// after the deadline's suspend and a wake the file is there in both, the
// process only in the second. On runc a deadline that must keep memory is
// refused at create (501 not_supported), nothing made.
func testDeadlineKeepMemory(ctx context.Context, t *testing.T, s *server, rt string) {
	c := s.client()
	never, no, yes := int64(0), false, true
	if rt == "runc" {
		_, err := c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{IdleTimeout: &never, Timeout: 60, OnTimeout: "suspend", TimeoutKeepMemory: &yes})
		if !client.IsCode(err, apiv1.CodeNotSupported) || !strings.Contains(err.Error(), "keep_memory true") {
			t.Fatalf("a deadline keeping memory on runc: %v, want not_supported", err)
		}
	}
	type tcase struct {
		name string
		keep *bool
		kind string // the snapshot's
		runs bool   // the process after the wake
	}
	cases := []tcase{{"filesystem only", &no, apiv1.SnapshotFilesystem, false}}
	if rt == "runsc" {
		cases = append(cases, tcase{"the runtime's (memory)", nil, apiv1.SnapshotMemory, true})
	}
	var wg sync.WaitGroup
	for _, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{IdleTimeout: &never, Timeout: 10, OnTimeout: "suspend", TimeoutKeepMemory: tc.keep})
			if (sb.TimeoutKeepMemory == nil) != (tc.keep == nil) {
				t.Errorf("%s: timeout_keep_memory %v", tc.name, sb.TimeoutKeepMemory)
				return
			}
			if _, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "sh", "-c", "echo kept > /root/deadline-kept.txt"); code != 0 {
				t.Errorf("%s: write the file: exit %d: %s", tc.name, code, stderr)
				return
			}
			if _, stderr, code := s.cli(ctx, "exec", "--detach", sb.ID, "--", "sleep", "602"); code != 0 {
				t.Errorf("%s: start the background process: exit %d: %s", tc.name, code, stderr)
				return
			}
			if got, err := c.GetSandbox(ctx, model.SandboxID(sb.ID)); err != nil || got.State != string(model.StateRunning) {
				t.Errorf("%s: not running before its deadline (the test was too slow?): %+v, %v", tc.name, got.State, err)
				return
			}
			got := s.waitState(ctx, model.SandboxID(sb.ID), model.StateSuspended)
			if got.Snapshot == nil || got.Snapshot.Kind != tc.kind {
				t.Errorf("%s: suspended by its deadline with snapshot %+v, want %s", tc.name, got.Snapshot, tc.kind)
				return
			}
			if _, stderr, code := s.cli(ctx, "sandbox", "wake", sb.ID); code != 0 {
				t.Errorf("%s: wake: exit %d: %s", tc.name, code, stderr)
				return
			}
			if out, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "cat", "/root/deadline-kept.txt"); code != 0 || out != "kept\n" {
				t.Errorf("%s: the file after the wake: exit %d: %q %s", tc.name, code, out, stderr)
			}
			out, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "ps", "-eo", "args")
			if code != 0 || strings.Contains(out, "sleep 602") != tc.runs {
				t.Errorf("%s: processes after the wake (sleep 602 running: want %v): exit %d: %s%s", tc.name, tc.runs, code, out, stderr)
			}
			if _, stderr, code := s.cli(ctx, "sandbox", "delete", sb.ID); code != 0 {
				t.Errorf("%s: delete: exit %d: %s", tc.name, code, stderr)
			}
		}()
	}
	wg.Wait()
}
