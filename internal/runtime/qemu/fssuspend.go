package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
)

// FormatDisk is the format of the runtime's filesystem-only snapshots: the
// VM's root disk, frozen after the guest synced its filesystems and QEMU
// stopped; neither memory nor device state. A wake boots the VM again
// over it: files kept, processes not.
const FormatDisk = "qemu-disk/1"

var _ runtime.FilesystemSuspender = (*Runtime)(nil)

// syncTimeout bounds the guest's sync before a filesystem suspend.
const syncTimeout = time.Minute

// SuspendFilesystem implements runtime.FilesystemSuspender: the guest
// syncs its filesystems through its agent (a paused VM is let run for
// it), QEMU stops the VM (which drains and flushes its disks) and ends;
// the disk stays, frozen, the VM's memory file goes. A sandbox suspended
// already returns its snapshot, of whichever kind; a crash after the stop
// leaves a VM that is not live (no started marker), which the next attempt
// ends (or, with no snapshot record yet, syncs and stops again).
func (r *Runtime) SuspendFilesystem(ctx context.Context, id model.SandboxID) (runtime.Snapshot, error) {
	return r.suspendWith(ctx, id, func(dir, _ string, m machine) (snapshotRecord, error) {
		if err := r.syncAndStop(ctx, id, dir); err != nil {
			return snapshotRecord{}, err
		}
		return snapshotRecord{Format: FormatDisk, SizeBytes: allocated(m.Disk)}, nil
	})
}

// syncAndStop has the guest sync its filesystems (letting a paused VM run
// for it) and stops the VM; QEMU's stop drains and flushes its disks, so
// what the guest synced is in the disk's file. A failed sync leaves the VM
// as it was.
func (r *Runtime) syncAndStop(ctx context.Context, id model.SandboxID, dir string) error {
	var before qmp.Status
	err := withQMP(ctx, dir, func(c *qmp.Client) (err error) {
		if before, err = c.QueryStatus(ctx); err != nil {
			return err
		}
		if !before.Running {
			return c.Cont(ctx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	// The caller holds the sandbox's lock (DialAgent takes it).
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.dialLive(ctx, id, dir) }, r.log.With("sandbox", id))
	res, err := c.Run(sctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"sync"}})
	c.Close()
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	if err != nil {
		if !before.Running {
			bg := context.WithoutCancel(ctx)
			_ = withQMP(bg, dir, func(c *qmp.Client) error { return c.Stop(bg) })
		}
		return fmt.Errorf("sync the guest's filesystems: %w", err)
	}
	return withQMP(ctx, dir, func(c *qmp.Client) error { return c.Stop(ctx) })
}

// bootFromDisk makes a sandbox suspended to a FormatDisk snapshot again:
// restore moved its frozen disk under a new copy-on-write disk (m's);
// QEMU starts with fresh memory, held before its first instruction, as a
// create that boots (Start lets it run and configures the guest once its
// agent answers).
func (r *Runtime) bootFromDisk(ctx context.Context, spec runtime.Spec, dir string, m machine) error {
	m.Memory, m.MemoryShared = filepath.Join(dir, memoryFile), true
	if err := os.Remove(m.Memory); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	if err := r.relaunch(ctx, spec, dir, m, false); err != nil {
		return fmt.Errorf("restore %s: %w", spec.ID, err)
	}
	return markCreated(dir, booted)
}
