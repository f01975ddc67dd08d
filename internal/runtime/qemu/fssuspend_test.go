package qemu_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
)

// TestSuspendFilesystemVM: a filesystem-only suspend of a VM keeps its
// disk (a file written just before, synced by the guest) and nothing of
// its memory (no QEMU, no RAM file), is idempotent whichever suspend asks
// again, refuses a restore as a memory snapshot, and its wake boots the VM
// again over the kept disk: the file is there, a process started before
// is not, and the guest has a new boot.
func TestSuspendFilesystemVM(t *testing.T) {
	e := newVMEnv(t)
	rt := e.runtime(t, false)
	ctx := ctxFor(t)
	spec := e.spec("fsonly", nil)
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Delete(ctxFor(t), spec.ID); assertNoVM(t, rt, spec.ID) })
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	c := client(t, rt, spec.ID)
	// Written and not synced by the writer: the suspend's sync keeps it.
	sh(t, c, "echo kept > /root/kept.txt")
	boot := sh(t, c, "cat /proc/sys/kernel/random/boot_id")
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	c.Close()

	t0 := time.Now()
	snap, err := rt.SuspendFilesystem(ctx, spec.ID)
	if err != nil {
		t.Fatalf("SuspendFilesystem: %v", err)
	}
	t.Logf("SuspendFilesystem: %v, %d bytes", time.Since(t0), snap.SizeBytes)
	if snap.Kind != model.SnapshotFilesystem || snap.Format != qemu.FormatDisk {
		t.Fatalf("snapshot %+v, want a filesystem snapshot in %s", snap, qemu.FormatDisk)
	}
	if _, err := rt.State(ctx, spec.ID); err == nil {
		t.Fatal("State finds the VM after the suspend")
	}
	if _, err := os.Stat(filepath.Join(rt.StateDir(spec.ID), "memory")); !os.IsNotExist(err) {
		t.Errorf("the VM's memory file stays after a filesystem suspend: %v", err)
	}
	for name, again := range map[string]func() (runtime.Snapshot, error){
		"SuspendFilesystem": func() (runtime.Snapshot, error) { return rt.SuspendFilesystem(ctx, spec.ID) },
		"Suspend":           func() (runtime.Snapshot, error) { return rt.Suspend(ctx, spec.ID) },
	} {
		if got, err := again(); err != nil || got != snap {
			t.Fatalf("%s of the suspended VM = %+v, %v; want %+v", name, got, err, snap)
		}
	}
	wrong := spec
	mem := snap
	mem.Kind, mem.Format = model.SnapshotMemory, qemu.FormatMigration
	wrong.Restore = &mem
	if err := rt.Create(ctx, wrong); err == nil {
		t.Fatal("Create restoring the disk snapshot as a migration succeeded")
	}

	wake := spec
	wake.Restore = &snap
	t0 = time.Now()
	if err := rt.Create(ctx, wake); err != nil {
		t.Fatalf("Create with Restore: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("wake (cold boot): %v", time.Since(t0))
	if err := rt.ForgetSnapshot(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	c = client(t, rt, spec.ID)
	if got := sh(t, c, "cat /root/kept.txt"); got != "kept" {
		t.Fatalf("the file after the wake: %q", got)
	}
	if ps := sh(t, c, "ps -eo args"); strings.Contains(ps, "sleep 600") {
		t.Fatalf("a process survived the filesystem suspend:\n%s", ps)
	}
	if again := sh(t, c, "cat /proc/sys/kernel/random/boot_id"); again == boot {
		t.Fatalf("the same boot after the wake (%s): not booted again", boot)
	}
	// Suspended again, with its memory this time: the woken VM is whole.
	if snap, err = rt.Suspend(ctx, spec.ID); err != nil || snap.Kind != model.SnapshotMemory {
		t.Fatalf("a memory suspend after the wake: %+v, %v", snap, err)
	}
}
