package qemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// Live snapshots and forks (runtime.LiveSnapshotter, Spec.From).
//
// A live snapshot is laid out as a base snapshot (base.go), in a directory
// of its own outside every sandbox's state directory, written under
// <dir>.tmp and renamed to <dir> once complete:
//
//	snapshot.json  the manifest (forkManifest), written last
//	disk           a copy of the source's root disk (its top layer; the
//	               layers below that are the source's own are copied too)
//	layer-N        those copied lower layers
//	memory         the guest's RAM, laid out as a VM's RAM file
//	state          the device state, migrated without the RAM
//
// SnapshotRunning stops the source's vCPUs, migrates its whole state (RAM
// included: a VM cloned from a base maps its RAM private, so no file holds
// it) into a stream, copies the disk QEMU flushed at the migration's end,
// and lets the source run on: it is stopped for the migration and the
// copy. Then, the source running, a helper QEMU (confined as every VM:
// its own uid, descriptors only) loads that stream into a RAM file of its
// own, shared, and saves its device state without the RAM: the snapshot's
// memory and state. A sandbox made from it (Create with Spec.From)
// restores it much as a clone restores a base snapshot: a copy of the
// snapshot's disk, the RAM file as a sealed memfd mapped private (the
// forks of one snapshot share every page they do not write) and the state
// loaded; Start hands the guest its own hostname, network address,
// entropy and time, so its processes continue where the source's were.

// FormatFork is the format of the runtime's live snapshots.
const FormatFork = "qemu-fork/1"

// Names in a live snapshot's directory.
const (
	forkManifestName = "snapshot.json"
	forkStreamName   = "stream" // the source's full migration stream, while converted
)

// forkManifest is a live snapshot's snapshot.json.
type forkManifest struct {
	Format    string    `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	// Machine is the source's machine as its forks run it: the disk,
	// chain and memory are the snapshot's files (by their final paths),
	// without network or guest settings, which are each fork's own.
	Machine machine `json:"machine"`
	// DiskBytes is the source's disk size: a fork asks for the same.
	DiskBytes int64 `json:"disk_bytes"`
	// TAPBacked: the source's NIC was joined to a TAP device (its
	// state asks for one): a fork needs a network.
	TAPBacked bool `json:"tap_backed,omitempty"`
}

var _ runtime.LiveSnapshotter = (*Runtime)(nil)

// SnapshotRunning implements runtime.LiveSnapshotter.
func (r *Runtime) SnapshotRunning(ctx context.Context, id model.SandboxID, dir string) (runtime.Snapshot, error) {
	if m, found, err := runtime.ExistingLiveSnapshot(id, dir, readForkManifest); err != nil {
		return runtime.Snapshot{}, err
	} else if found {
		return m.snapshot(dir), nil
	}
	var man forkManifest
	err := runtime.WriteLiveSnapshot(dir, func(tmp string) (err error) {
		man, err = r.writeLiveSnapshot(ctx, id, tmp, dir)
		return err
	})
	if err != nil {
		return runtime.Snapshot{}, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	return man.snapshot(dir), nil
}

// writeLiveSnapshot writes the live snapshot of the sandbox into the empty
// directory tmp, to be renamed to dir.
func (r *Runtime) writeLiveSnapshot(ctx context.Context, id model.SandboxID, tmp, dir string) (forkManifest, error) {
	m, diskSize, tapBacked, err := r.captureSource(ctx, id, tmp, dir)
	if err != nil {
		return forkManifest{}, err
	}
	// The source runs on; the stream becomes a RAM file and a state.
	if err := r.convertStream(ctx, tmp, m, tapBacked); err != nil {
		return forkManifest{}, fmt.Errorf("convert the migration stream: %w", err)
	}
	man := forkManifest{Format: FormatFork, CreatedAt: time.Now().UTC(), Machine: m, DiskBytes: diskSize, TAPBacked: tapBacked}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return forkManifest{}, err
	}
	for _, e := range entries {
		man.SizeBytes += allocated(filepath.Join(tmp, e.Name()))
	}
	b, err := json.Marshal(man)
	if err != nil {
		return forkManifest{}, err
	}
	return man, atomicfile.Write(filepath.Join(tmp, forkManifestName), b, 0o600)
}

// captureSource stops the source's vCPUs, migrates its whole state into
// tmp's stream, copies its disk and lets it go on as it was (running, or
// paused). It returns the machine the snapshot's forks run (its files
// named by their paths under final) and the source's disk size.
func (r *Runtime) captureSource(ctx context.Context, id model.SandboxID, tmp, final string) (_ machine, _ int64, tapBacked bool, err error) {
	unlock := r.lock(id)
	defer unlock()
	st, err := r.stateLocked(ctx, id)
	if err != nil {
		return machine{}, 0, false, err
	}
	if !st.Phase.Alive() {
		return machine{}, 0, false, fmt.Errorf("the sandbox is %s, not running or paused: nothing to snapshot", st.Phase)
	}
	srcDir := r.dir(id)
	m, err := readMachine(srcDir)
	if err != nil {
		return machine{}, 0, false, err
	}
	f, err := os.OpenFile(filepath.Join(tmp, forkStreamName), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return machine{}, 0, false, err
	}
	defer f.Close()
	wasPaused := st.Phase == runtime.PhasePaused
	var out machine
	var diskSize int64
	err = withQMPTimeout(ctx, srcDir, migrationTimeout, func(c *qmp.Client) (err error) {
		if err := c.Stop(ctx); err != nil {
			return err
		}
		stopped := time.Now()
		defer func() {
			r.log.DebugContext(ctx, "live snapshot: the source was stopped", "sandbox", id, "for", time.Since(stopped))
			// Back as it was, whatever happened: cont also takes the
			// disk back from a completed migration, so a paused source
			// runs for an instant before it is stopped again.
			bg := context.WithoutCancel(ctx)
			if cerr := c.Cont(bg); cerr != nil {
				err = errors.Join(err, fmt.Errorf("continue the source: %w", cerr))
				return
			}
			if wasPaused {
				if serr := c.Stop(bg); serr != nil {
					err = errors.Join(err, fmt.Errorf("pause the source again: %w", serr))
				}
			}
		}()
		// The whole state, RAM included (its own RAM file is shared
		// and goes on changing once the source runs again).
		if err := c.MigrateSetCapabilities(ctx, qmp.MigrationCapability{Capability: "x-ignore-shared", State: false}); err != nil {
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
		// The migration's end flushed the disk: copy it now, before
		// the source writes again.
		out, diskSize, err = copyDisk(ctx, srcDir, m, tmp, final)
		return err
	})
	if err != nil {
		return machine{}, 0, false, err
	}
	return out, diskSize, m.NIC && m.TAP != "", f.Sync()
}

// copyDisk copies the source's root disk into tmp (and the layers of its
// chain that are the source's own, e.g. a woken sandbox's frozen disk)
// and returns the forks' machine: the source's devices, the copied disk
// and chain named by their paths under final, the RAM file to be made.
func copyDisk(ctx context.Context, srcDir string, m machine, tmp, final string) (machine, int64, error) {
	out := m
	out.Netns, out.TAP, out.MAC = "", "", ""
	out.Guest = guestSettings{}
	out.Base = ""
	if err := copyFileSparse(ctx, m.Disk, filepath.Join(tmp, diskFile)); err != nil {
		return machine{}, 0, err
	}
	out.Disk = filepath.Join(final, diskFile)
	out.Chain = nil
	for i, l := range m.Chain {
		if strings.HasPrefix(l.Path, srcDir+string(filepath.Separator)) {
			name := fmt.Sprintf("layer-%d", i)
			if err := copyFileSparse(ctx, l.Path, filepath.Join(tmp, name)); err != nil {
				return machine{}, 0, err
			}
			l.Path = filepath.Join(final, name)
		}
		out.Chain = append(out.Chain, l)
	}
	out.Memory, out.MemoryShared = filepath.Join(final, memoryFile), false
	info, err := vmdisk.Info(ctx, filepath.Join(tmp, diskFile))
	if err != nil {
		return machine{}, 0, err
	}
	return out, info.VirtualSize, nil
}

// copyFileSparse copies the regular file src to the new file dst (a
// reflink where the filesystem can, else its data extents).
func copyFileSparse(ctx context.Context, src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("copy %s: not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if _, err := treecopy.File(ctx, out, in, fi.Size()); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// convertStream loads tmp's full migration stream into a helper QEMU
// whose RAM is a shared file of its own, saves that VM's device state
// without its RAM, and leaves tmp/memory and tmp/state (the stream is
// removed). The helper never runs a guest instruction; it runs in a
// directory of its own below the state root (its id reservation names
// it), StateRoot/.fork/fork-<pid>-<random>.
func (r *Runtime) convertStream(ctx context.Context, tmp string, fm machine, tapBacked bool) (err error) {
	root := filepath.Join(r.stateRoot, forkHelpersDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	r.sweepForkHelpers(ctx)
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	name := fmt.Sprintf("fork-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))
	hdir := filepath.Join(root, name)
	if err := os.Mkdir(hdir, 0o700); err != nil {
		return err
	}
	defer func() {
		if rerr := r.removeVM(context.WithoutCancel(ctx), hdir, name); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the helper VM: %w", rerr))
		}
	}()
	// fm names the snapshot's files by their final paths: the helper
	// opens them where they are now.
	final := filepath.Dir(fm.Disk) + string(filepath.Separator)
	hm := fm
	hm.Disk = filepath.Join(tmp, diskFile)
	hm.Chain = nil
	for _, l := range fm.Chain {
		if rel, ok := strings.CutPrefix(l.Path, final); ok {
			l.Path = filepath.Join(tmp, rel)
		} // else a shared layer (a base's disk, a template image)
		hm.Chain = append(hm.Chain, l)
	}
	hm.Memory, hm.MemoryShared = filepath.Join(hdir, memoryFile), true
	if tapBacked {
		// The source's NIC was a TAP's (with virtio-net headers): its
		// state loads only into a NIC that is one too. The helper's
		// TAP is in a network namespace of its own, which dies with
		// the helper.
		ns, err := scratchNetnsWithTAP()
		if err != nil {
			return err
		}
		defer ns.Close()
		hm.Netns, hm.TAP = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns)), tapDevice
	}
	if _, err := r.launch(ctx, hdir, name, hm, true); err != nil {
		return err
	}
	if err := loadVM(ctx, hdir, filepath.Join(tmp, forkStreamName), false); err != nil {
		r.drainLog(hdir)
		return fmt.Errorf("%w (console: %s; qemu: %s)", err, consoleTail(hdir), logTail(filepath.Join(hdir, qemuLog)))
	}
	if err := saveVM(ctx, hdir, filepath.Join(tmp, stateFile), true); err != nil {
		r.drainLog(hdir)
		return fmt.Errorf("%w (qemu: %s)", err, logTail(filepath.Join(hdir, qemuLog)))
	}
	if pid := vmPid(hdir, name); pid != 0 {
		if err := killVM(ctx, pid, name); err != nil {
			return err
		}
	}
	// Root's again (forks get a descriptor), next to the disk.
	if err := os.Chown(hm.Memory, 0, 0); err != nil {
		return err
	}
	mem := filepath.Join(tmp, memoryFile)
	if err := os.Rename(hm.Memory, mem); errors.Is(err, syscall.EXDEV) {
		err = copyFileSparse(ctx, hm.Memory, mem)
	} else if err != nil {
		return err
	}
	if err := atomicfile.SyncFile(mem); err != nil {
		return err
	}
	return os.Remove(filepath.Join(tmp, forkStreamName))
}

// forkHelpersDir is below StateRoot: the directories of helper VMs.
const forkHelpersDir = ".fork"

// sweepForkHelpers ends the QEMU and removes the directory of helper VMs
// whose process no longer runs (a server that crashed mid-snapshot).
func (r *Runtime) sweepForkHelpers(ctx context.Context) {
	root := filepath.Join(r.stateRoot, forkHelpersDir)
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		var owner int
		if _, err := fmt.Sscanf(e.Name(), "fork-%d-", &owner); err != nil || owner == os.Getpid() || unix.Kill(owner, 0) == nil {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if err := r.removeVM(ctx, dir, e.Name()); err != nil {
			r.log.WarnContext(ctx, "leftover of a live snapshot's helper VM stays", "dir", dir, "err", err)
		}
	}
}

// RemoveSnapshot implements runtime.LiveSnapshotter. Forks made from the
// snapshot keep running and outlive it: each has a copy of its disk's top
// layer, and its RAM is a descriptor QEMU holds (a suspended fork wakes
// into a RAM file of its own).
func (r *Runtime) RemoveSnapshot(_ context.Context, dir string) error {
	r.forgetBaseMemory(filepath.Join(dir, memoryFile))
	return runtime.RemoveSnapshotDir(dir, forkManifestName)
}

func readForkManifest(dir string) (forkManifest, error) {
	m, err := runtime.ReadSnapshotManifest[forkManifest](dir, forkManifestName)
	if err == nil && m.Format != FormatFork {
		return m, fmt.Errorf("%s: format %q is not %q: %w", filepath.Join(dir, forkManifestName), m.Format, FormatFork, runtime.ErrNotSupported)
	}
	return m, err
}

// snapshot is the runtime's handle on the live snapshot at dir.
func (m forkManifest) snapshot(dir string) runtime.Snapshot {
	return runtime.Snapshot{Kind: model.SnapshotMemory, Format: m.Format, Location: dir, SizeBytes: m.SizeBytes, CreatedAt: m.CreatedAt}
}

// checkFrom checks that spec.From is a complete live snapshot of this
// runtime's format that spec can be made from.
func (r *Runtime) checkFrom(spec runtime.Spec) (forkManifest, error) {
	snap := spec.From
	if snap.Format != FormatFork || snap.Kind != model.SnapshotMemory {
		return forkManifest{}, fmt.Errorf("a %s snapshot in format %q cannot be forked by qemu (it forks memory snapshots in format %q): %w",
			snap.Kind, snap.Format, FormatFork, runtime.ErrNotSupported)
	}
	if !filepath.IsAbs(snap.Location) || filepath.Clean(snap.Location) != snap.Location {
		return forkManifest{}, fmt.Errorf("snapshot location %q must be absolute and clean", snap.Location)
	}
	m, err := readForkManifest(snap.Location)
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("no complete snapshot at %s: %w", snap.Location, runtime.ErrNotFound)
	}
	if err != nil {
		return m, err
	}
	if spec.Resources.DiskBytes > 0 && diskBytes(spec) != m.DiskBytes {
		return m, fmt.Errorf("the snapshot's disk is %d bytes, the spec asks for %d", m.DiskBytes, diskBytes(spec))
	}
	if spec.Network != nil && !m.Machine.NIC {
		return m, fmt.Errorf("the snapshot's VM has no network device, the spec asks for a network: %w", runtime.ErrNotSupported)
	}
	if spec.Network == nil && m.TAPBacked {
		return m, fmt.Errorf("the snapshot's VM has a network device, the spec gives no network: %w", runtime.ErrNotSupported)
	}
	return m, nil
}

// createFrom makes the sandbox's VM from the live snapshot spec.From, in
// dir (made and empty), paused: Start lets it run and configures its
// guest.
func (r *Runtime) createFrom(ctx context.Context, dir string, spec runtime.Spec) error {
	fm, err := r.checkFrom(spec)
	if err != nil {
		return err
	}
	// The snapshot's devices, memory size and vCPUs (its state needs
	// them); the spec's network and guest settings.
	own, err := r.machineFor(ctx, spec)
	if err != nil {
		return err
	}
	m := fm.Machine
	if own.Accel != fm.Machine.Accel || own.Kernel != fm.Machine.Kernel || own.Initrd != fm.Machine.Initrd || own.Cmdline != fm.Machine.Cmdline {
		return fmt.Errorf("the snapshot was taken with another kernel, command line or accelerator than this runtime boots: %w", runtime.ErrNotSupported)
	}
	m.Netns, m.TAP, m.MAC = own.Netns, own.TAP, "" // the device's MAC is the snapshot's (its state is restored)
	m.Guest = own.Guest
	m.Base = spec.From.Location
	// The fork outlives the snapshot (a fork's snapshot is removed once
	// its sandboxes are made): its disk is a copy of the snapshot's, and
	// of the layers below that are the snapshot's own; the layers shared
	// with others (a base's disk, a template image) stay where they are.
	// Its RAM is the snapshot's memfd, which its QEMU holds.
	m.Disk = filepath.Join(dir, diskFile)
	if err := copyFileSparse(ctx, fm.Machine.Disk, m.Disk); err != nil {
		return err
	}
	m.Chain = nil
	for i, l := range fm.Machine.Chain {
		if strings.HasPrefix(l.Path, spec.From.Location+string(filepath.Separator)) {
			own := filepath.Join(dir, fmt.Sprintf("layer-%d", i))
			if err := copyFileSparse(ctx, l.Path, own); err != nil {
				return err
			}
			l.Path = own
		}
		m.Chain = append(m.Chain, l)
	}
	m.Memory, m.MemoryShared = fm.Machine.Memory, false
	if err := writeMachine(dir, m); err != nil {
		return err
	}
	if _, err := r.launch(ctx, dir, spec.ID.String(), m, true); err != nil {
		return err
	}
	if err := loadVM(ctx, dir, filepath.Join(spec.From.Location, stateFile), true); err != nil {
		return fmt.Errorf("%w (console: %s)", err, consoleTail(dir))
	}
	return markCreated(dir, forked)
}
