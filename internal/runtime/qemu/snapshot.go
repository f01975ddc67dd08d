package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// FormatMigration is the format of the runtime's snapshots: QEMU's
// migration stream of the stopped VM (its device state, and its RAM unless
// the RAM is the VM's own shared memory file, which then is the snapshot's
// RAM), with the root disk frozen as it was.
const FormatMigration = "qemu-migration/1"

// snapshotRecord is snapshot/snapshot.json.
type snapshotRecord struct {
	Format string `json:"format"`
	// IgnoreShared: the stream was written with x-ignore-shared, without
	// the RAM, which is in Memory (the VM's shared memory file).
	IgnoreShared bool   `json:"ignore_shared"`
	Memory       string `json:"memory"`
	// Layer is where the frozen disk goes when a restore moves it out of
	// the way (named at suspend, so a restore that crashed after the move
	// finds it); LayerFormat is its format as the host made it (never
	// guessed from the bytes: a guest writes the disk).
	Layer       string        `json:"layer"`
	LayerFormat vmdisk.Format `json:"layer_format"`
	// BootID is the host's boot when the snapshot was taken: RAM left in
	// the shared memory file (IgnoreShared) is in the page cache, not
	// synced, and does not survive a host restart.
	BootID    string    `json:"boot_id"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
}

// Pause stops the VM's vCPUs (QMP stop); its memory stays resident.
func (r *Runtime) Pause(ctx context.Context, id model.SandboxID) error {
	return r.pauseResume(ctx, id, true)
}

// Resume lets a paused VM run again (QMP cont).
func (r *Runtime) Resume(ctx context.Context, id model.SandboxID) error {
	return r.pauseResume(ctx, id, false)
}

func (r *Runtime) pauseResume(ctx context.Context, id model.SandboxID, pause bool) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	unlock := r.lock(id)
	defer unlock()
	st, err := r.stateLocked(ctx, id)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, id, err)
	}
	switch {
	case pause && st.Phase == runtime.PhasePaused, !pause && st.Phase == runtime.PhaseRunning:
		return nil
	case st.Phase != runtime.PhaseRunning && st.Phase != runtime.PhasePaused:
		return fmt.Errorf("%s %s: the sandbox is %s", verb, id, st.Phase)
	}
	err = withQMP(ctx, r.dir(id), func(c *qmp.Client) error {
		if pause {
			return c.Stop(ctx)
		}
		return c.Cont(ctx)
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, id, err)
	}
	return nil
}

// migrationTimeout bounds saving or loading a VM's state.
const migrationTimeout = 2 * time.Minute

// Suspend stops the VM, writes its state into snapshot/ and ends QEMU. A
// VM whose RAM is its own shared memory file is saved without its RAM
// (x-ignore-shared: milliseconds); a VM restored from a snapshot (its RAM
// a private copy-on-write mapping) is saved with it. The disk stays as it
// was, frozen.
func (r *Runtime) Suspend(ctx context.Context, id model.SandboxID) (runtime.Snapshot, error) {
	return r.suspendWith(ctx, id, func(dir, snapDir string, m machine) (snapshotRecord, error) {
		state := filepath.Join(snapDir, stateFile)
		if err := saveVM(ctx, dir, state, m.MemoryShared); err != nil {
			return snapshotRecord{}, err
		}
		rec := snapshotRecord{Format: FormatMigration, IgnoreShared: m.MemoryShared, Memory: m.Memory, BootID: hostBootID()}
		if fi, err := os.Stat(state); err == nil {
			rec.SizeBytes = fi.Size()
		}
		if m.MemoryShared {
			rec.SizeBytes += allocated(m.Memory)
		}
		return rec, nil
	})
}

// suspendWith suspends sandbox id: save stops its VM (m, in dir) and
// writes into snapDir what the snapshot keeps, returning its record
// (Format, what it keeps of the memory); the frozen disk's layer name is
// added here. Then the VM is no longer live (no started marker), the
// record is written and QEMU ends; a RAM file of the VM's own that the
// record does not keep goes. A sandbox suspended already returns its
// snapshot (suspendBegin).
func (r *Runtime) suspendWith(ctx context.Context, id model.SandboxID, save func(dir, snapDir string, m machine) (snapshotRecord, error)) (runtime.Snapshot, error) {
	unlock := r.lock(id)
	defer unlock()
	snap, err := r.suspendLocked(ctx, id, save)
	if err != nil {
		return runtime.Snapshot{}, fmt.Errorf("suspend %s: %w", id, err)
	}
	return snap, nil
}

func (r *Runtime) suspendLocked(ctx context.Context, id model.SandboxID, save func(dir, snapDir string, m machine) (snapshotRecord, error)) (runtime.Snapshot, error) {
	dir := r.dir(id)
	name := id.String()
	snapDir := filepath.Join(dir, snapshotDir)
	if snap, done, err := r.suspendBegin(ctx, dir, name, snapDir); err != nil || done {
		return snap, err
	}
	pid := vmPid(dir, name)
	m, err := readMachine(dir)
	if err != nil {
		return runtime.Snapshot{}, err
	}
	rec, err := save(dir, snapDir, m)
	if err != nil {
		return runtime.Snapshot{}, err
	}
	// From here the VM is not live: a crash before the record leaves a
	// stopped QEMU that the next attempt saves again, one after it a
	// record whose QEMU suspendBegin ends.
	if err := os.Remove(filepath.Join(dir, startedFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return runtime.Snapshot{}, err
	}
	now := time.Now().UTC()
	rec.CreatedAt = now
	rec.Layer, rec.LayerFormat = filepath.Join(dir, fmt.Sprintf("layer-%d", now.UnixNano())), m.DiskFormat
	if err := writeSnapshot(snapDir, rec); err != nil {
		return runtime.Snapshot{}, err
	}
	if err := killVM(ctx, pid, name); err != nil {
		return runtime.Snapshot{}, err
	}
	if rec.Memory != m.Memory && m.MemoryShared && within(dir, m.Memory) {
		// Its memory is not kept (one mapped private from a base
		// snapshot is the base's, not the VM's).
		if err := os.Remove(m.Memory); err != nil && !errors.Is(err, os.ErrNotExist) {
			return runtime.Snapshot{}, err
		}
	}
	return rec.snapshot(snapDir), nil
}

// suspendBegin is the start of a suspend of the VM in dir: done with the
// snapshot when it is suspended already (of whichever kind; a suspend that
// crashed after writing its snapshot, or a wake's leftover QEMU that never
// ran, is ended first); otherwise a live VM with an empty snapDir for the
// new snapshot (one woken from a snapshot and running, ForgetSnapshot not
// called yet, gets a new one in its place).
func (r *Runtime) suspendBegin(ctx context.Context, dir, name, snapDir string) (snap runtime.Snapshot, done bool, err error) {
	if rec, err := readSnapshot(snapDir); err == nil {
		pid := vmPid(dir, name)
		if pid == 0 {
			return rec.snapshot(snapDir), true, nil // suspended already
		}
		if live, err := r.liveAfterWake(ctx, dir); err != nil {
			return runtime.Snapshot{}, false, err
		} else if !live {
			if err := killVM(ctx, pid, name); err != nil {
				return runtime.Snapshot{}, false, err
			}
			return rec.snapshot(snapDir), true, nil
		}
	}
	if !exists(dir) {
		return runtime.Snapshot{}, false, runtime.ErrNotFound
	}
	if vmPid(dir, name) == 0 {
		return runtime.Snapshot{}, false, errors.New("the sandbox is stopped")
	}
	if err := os.RemoveAll(snapDir); err != nil { // a partial earlier attempt
		return runtime.Snapshot{}, false, err
	}
	if err := os.Mkdir(snapDir, 0o700); err != nil {
		return runtime.Snapshot{}, false, err
	}
	return runtime.Snapshot{}, false, nil
}

// saveVM stops the VM and writes its migration stream to state (fsynced).
// The file is opened here and handed to QEMU (getfd, then fd:), so QEMU
// spawns nothing (its seccomp sandbox forbids it) and writes only what it
// was given.
func saveVM(ctx context.Context, dir, state string, ignoreShared bool) error {
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	f, err := os.OpenFile(state, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	err = withQMPTimeout(ctx, dir, migrationTimeout, func(c *qmp.Client) (err error) {
		before, err := c.QueryStatus(ctx)
		if err != nil {
			return err
		}
		if err := c.Stop(ctx); err != nil {
			return err
		}
		defer func() {
			// A failed save leaves the VM as it was: running again if
			// it ran (cont also takes the disk back from the migration).
			if err != nil && before.Running {
				if cerr := c.Cont(context.WithoutCancel(ctx)); cerr != nil {
					err = fmt.Errorf("%w (and the VM could not be continued: %w)", err, cerr)
				}
			}
		}()
		if err := c.MigrateSetCapabilities(ctx, qmp.MigrationCapability{Capability: "x-ignore-shared", State: ignoreShared}); err != nil {
			return err
		}
		if err := c.SendFD(ctx, migrationFD, f); err != nil {
			return err
		}
		if err := c.Migrate(ctx, "fd:"+migrationFD); err != nil {
			return err
		}
		if _, err := c.WaitMigration(ctx, 5*time.Millisecond); err != nil {
			return err
		}
		return f.Sync()
	})
	return err
}

// migrationFD is the name under which QEMU gets a migration's file.
const migrationFD = "airlock-migration"

// loadVM feeds state to a QEMU started with -incoming defer and waits
// until it is loaded (the VM is then paused).
func loadVM(ctx context.Context, dir, state string, ignoreShared bool) error {
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	f, err := os.Open(state)
	if err != nil {
		return err
	}
	defer f.Close()
	return withQMPTimeout(ctx, dir, migrationTimeout, func(c *qmp.Client) error {
		if err := c.MigrateSetCapabilities(ctx, qmp.MigrationCapability{Capability: "x-ignore-shared", State: ignoreShared}); err != nil {
			return err
		}
		if err := c.SendFD(ctx, migrationFD, f); err != nil {
			return err
		}
		if err := c.MigrateIncoming(ctx, "fd:"+migrationFD); err != nil {
			return err
		}
		st, err := c.WaitStatus(ctx, 5*time.Millisecond, func(s qmp.Status) bool { return s.Status != qmp.StatusInMigrate })
		if err != nil {
			return err
		}
		if st.Status != qmp.StatusPaused {
			mi, _ := c.QueryMigrate(ctx)
			return fmt.Errorf("restore: the VM is %s after loading its state (migration %s: %s)", st.Status, mi.Status, mi.ErrorDesc)
		}
		return nil
	})
}

// restore makes a suspended sandbox's VM again from its snapshot, paused
// (Start lets it run). The snapshot stays (ForgetSnapshot removes it once
// the sandbox answers): the frozen disk becomes a layer under a new
// copy-on-write disk and the RAM file is mapped private, so neither
// changes and a failed wake can be tried again.
func (r *Runtime) restore(ctx context.Context, spec runtime.Spec) error {
	id := spec.ID
	dir := r.dir(id)
	name := id.String()
	snapDir := filepath.Join(dir, snapshotDir)
	if spec.Restore.Format != FormatMigration && spec.Restore.Format != FormatDisk {
		return fmt.Errorf("restore %s: snapshot format %q is neither %q nor %q", id, spec.Restore.Format, FormatMigration, FormatDisk)
	}
	if filepath.Clean(spec.Restore.Location) != snapDir {
		return fmt.Errorf("restore %s: the snapshot at %s is not this sandbox's (%s)", id, spec.Restore.Location, snapDir)
	}
	rec, err := readSnapshot(snapDir)
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if rec.Format != spec.Restore.Format {
		return fmt.Errorf("restore %s: the snapshot is %q, not %q", id, rec.Format, spec.Restore.Format)
	}
	if pid := vmPid(dir, name); pid != 0 {
		if exists(filepath.Join(dir, createdFile)) && !exists(filepath.Join(dir, startedFile)) {
			return nil // an earlier attempt restored it: Start lets it run
		}
		if live, err := r.liveAfterWake(ctx, dir); err != nil {
			return fmt.Errorf("restore %s: %w", id, err)
		} else if live {
			return nil // woken and alive (running or paused): never destroyed
		}
		if err := killVM(ctx, pid, name); err != nil {
			return fmt.Errorf("restore %s: %w", id, err)
		}
	}
	if rec.IgnoreShared && rec.BootID != "" && rec.BootID != hostBootID() {
		return fmt.Errorf("restore %s: %w: the host restarted since the snapshot was taken, and its memory (kept in the page cache, not synced) did not survive", id, errSnapshotLost)
	}
	m, err := readMachine(dir)
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	disk := filepath.Join(dir, diskFile)
	if rec.Layer == "" || rec.LayerFormat == "" {
		return fmt.Errorf("restore %s: %w: the snapshot names no frozen disk", id, errSnapshotLost)
	}
	// The frozen disk moves to its layer name, once: after that (also
	// after a crash right after the move) disk is a failed attempt's.
	if !exists(rec.Layer) {
		if err := os.Rename(disk, rec.Layer); err != nil {
			return fmt.Errorf("restore %s: freeze the disk: %w", id, err)
		}
	} else if err := os.Remove(disk); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if len(m.Chain) == 0 && rec.LayerFormat == vmdisk.QCOW2 {
		// Suspended before the runtime recorded backing chains (QEMU
		// then ran as root and opened them by their header's names):
		// read the chain once from the headers that QEMU wrote.
		if m.Chain, err = legacyChain(ctx, rec.Layer); err != nil {
			return fmt.Errorf("restore %s: %w", id, err)
		}
	}
	var err2 error
	if m.DiskFormat, err2 = vmdisk.Clone(ctx, rec.Layer, rec.LayerFormat, disk); err2 != nil {
		return fmt.Errorf("restore %s: %w", id, err2)
	}
	m.Chain = chainOver(m.DiskFormat, diskLayer{rec.Layer, rec.LayerFormat}, m.Chain)
	m.Disk = disk
	m.Memory, m.MemoryShared = rec.Memory, false
	if rec.Format == FormatDisk {
		// Only the disk was kept: the VM boots again over it, with fresh
		// memory.
		return r.bootFromDisk(ctx, spec, dir, m)
	}
	if !rec.IgnoreShared && !within(dir, rec.Memory) && !exists(rec.Memory) {
		// The stream holds the whole RAM and the file the VM mapped
		// private is gone (a fork's live snapshot, removed once its
		// sandboxes were made): the RAM goes into a file of its own.
		m.Memory, m.MemoryShared = filepath.Join(dir, memoryFile), true
		if err := os.Remove(m.Memory); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("restore %s: %w", id, err)
		}
	}
	if err := r.relaunch(ctx, spec, dir, m, true); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if err := loadVM(ctx, dir, filepath.Join(snapDir, stateFile), rec.IgnoreShared); err != nil {
		console := consoleTail(dir)
		if pid := vmPid(dir, name); pid != 0 {
			_ = killVM(context.WithoutCancel(ctx), pid, name)
		}
		return fmt.Errorf("restore %s: %w (console: %s)", id, err, console)
	}
	return markCreated(dir, fromSnapshot)
}

// relaunch starts QEMU again for a sandbox being woken, with machine m
// on the sandbox's network (a new TAP in its namespace) and the spec's
// guest settings: held before its first instruction for a boot, waiting
// for its state with incoming.
func (r *Runtime) relaunch(ctx context.Context, spec runtime.Spec, dir string, m machine, incoming bool) error {
	if n := spec.Network; n != nil && m.NIC {
		link, err := attachTAP(ctx, n.NetnsPath)
		if err != nil {
			return fmt.Errorf("network: %w", err)
		}
		m.Netns, m.TAP = n.NetnsPath, link.TAP
	}
	m.Guest.Hostname, m.Guest.Env, m.Guest.PidsMax = spec.Hostname, spec.Env.List(), spec.Resources.PidsLimit
	if err := writeMachine(dir, m); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, startedFile))
	_ = os.Remove(filepath.Join(dir, createdFile))
	_, err := r.launch(ctx, dir, spec.ID.String(), m, incoming)
	return err
}

// legacyChain is the backing chain below the qcow2 disk at path as its
// headers name it (qemu-img info --backing-chain), for disks made before
// the runtime recorded chains.
func legacyChain(ctx context.Context, path string) ([]diskLayer, error) {
	info, err := vmdisk.Info(ctx, path)
	if err != nil {
		return nil, err
	}
	var c []diskLayer
	for b := info.Backing; b != nil; b = b.Backing {
		c = append(c, diskLayer{Path: b.Path, Format: b.Format})
	}
	return c, nil
}

// errSnapshotLost: the snapshot cannot be restored any more.
var errSnapshotLost = errors.New("snapshot lost")

// liveAfterWake reports whether the VM in dir was let run (Start) and is
// running or paused now: a live sandbox, as opposed to QEMU stopped by a
// suspend's migration or a wake's leftover.
func (r *Runtime) liveAfterWake(ctx context.Context, dir string) (bool, error) {
	if !exists(filepath.Join(dir, startedFile)) {
		return false, nil
	}
	var st qmp.Status
	if err := withQMP(ctx, dir, func(c *qmp.Client) (err error) {
		st, err = c.QueryStatus(ctx)
		return err
	}); err != nil {
		return false, err
	}
	return st.Running || st.Status == qmp.StatusPaused, nil
}

// hostBootID identifies the host's current boot ("" if unknown).
func hostBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ForgetSnapshot removes the snapshot of a woken sandbox (its migration
// stream; the frozen disk and RAM file stay, the running VM's disk and
// memory are copy-on-write over them).
func (r *Runtime) ForgetSnapshot(ctx context.Context, id model.SandboxID) error {
	unlock := r.lock(id)
	defer unlock()
	dir := r.dir(id)
	if vmPid(dir, id.String()) == 0 || !exists(filepath.Join(dir, startedFile)) {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(dir, snapshotDir)); err != nil {
		return fmt.Errorf("forget snapshot of %s: %w", id, err)
	}
	return nil
}

func (rec snapshotRecord) snapshot(loc string) runtime.Snapshot {
	kind := model.SnapshotMemory
	if rec.Format == FormatDisk {
		kind = model.SnapshotFilesystem
	}
	return runtime.Snapshot{
		Kind:      kind,
		Format:    rec.Format,
		Location:  loc,
		SizeBytes: rec.SizeBytes,
		CreatedAt: rec.CreatedAt,
	}
}

func readSnapshot(snapDir string) (snapshotRecord, error) {
	var rec snapshotRecord
	b, err := os.ReadFile(filepath.Join(snapDir, snapshotMeta))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", filepath.Join(snapDir, snapshotMeta), err)
	}
	if rec.Format != FormatMigration && rec.Format != FormatDisk {
		return rec, fmt.Errorf("%s: format %q is neither %q nor %q", filepath.Join(snapDir, snapshotMeta), rec.Format, FormatMigration, FormatDisk)
	}
	return rec, nil
}

func writeSnapshot(snapDir string, rec snapshotRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(snapDir, snapshotMeta), b, 0o600)
}

// allocated is the host disk space a (sparse) file takes.
func allocated(p string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}
