package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Live snapshots and forks (runtime.LiveSnapshotter, Spec.From).
//
// A live snapshot is a directory of its own, outside every sandbox's
// state directory, written under <dir>.tmp and renamed to <dir> once
// complete:
//
//	snapshot.json  the manifest (forkManifest)
//	disk.img       the sandbox's own filesystem image (with a disk limit),
//	               copied sparsely while the sandbox was frozen
//	upper/         or, without one, the overlay's upper layer
//	checkpoint/    runsc: `runsc checkpoint --leave-running`'s image
//
// The source is frozen (runc/crun: the cgroup freezer; runsc: its sentry
// paused) while its filesystem is synced and copied, then continues; runsc
// then checkpoints it with --leave-running, so its processes go on. A new
// sandbox made from the snapshot (Create with Spec.From) gets a copy of
// the filesystem in its own state directory, with its own id range (runc
// and crun: the copy's owners are shifted from the source's range into the
// new one) and its own network; runsc restores the checkpoint into it, so
// its processes continue from the moment of the snapshot, while runc and
// crun boot a fresh agent over the copied files (processes start again).

// Live snapshot formats.
const (
	// FormatForkUpper: runc or crun, the filesystem only.
	FormatForkUpper = "oci-fork-upper/1"
	// FormatForkRunsc: runsc, memory and kernel state plus the filesystem.
	FormatForkRunsc = "runsc-fork/1"
)

// Names in a live snapshot's directory.
const (
	forkImageName = "disk.img"
	forkUpperName = "upper"
)

// forkManifest is a live snapshot's snapshot.json.
type forkManifest struct {
	// snapshotManifest's DiskImage: the source had a disk limit (the
	// snapshot holds its image); a sandbox made from it must ask for one
	// too.
	snapshotManifest
	// IDHost is the first host id of the source's id range (runc and
	// crun), whose owners the copy's files carry; 0: none (runsc).
	IDHost uint32 `json:"id_host,omitempty"`
}

var _ runtime.LiveSnapshotter = (*Runtime)(nil)

func (r *Runtime) forkFormat() (model.SnapshotKind, string) {
	if r.flavor == FlavorRunsc {
		return model.SnapshotMemory, FormatForkRunsc
	}
	return model.SnapshotFilesystem, FormatForkUpper
}

// SnapshotRunning implements runtime.LiveSnapshotter.
func (r *Runtime) SnapshotRunning(ctx context.Context, id model.SandboxID, dir string) (runtime.Snapshot, error) {
	if m, found, err := runtime.ExistingLiveSnapshot(id, dir, readForkManifest); err != nil {
		return runtime.Snapshot{}, err
	} else if found {
		return m.snapshot(dir), nil
	}
	unlock := r.lock(id)
	defer unlock()
	snap, err := r.snapshotRunning(ctx, id, dir)
	if err != nil {
		return runtime.Snapshot{}, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	return snap, nil
}

func (r *Runtime) snapshotRunning(ctx context.Context, id model.SandboxID, dir string) (runtime.Snapshot, error) {
	st, err := r.observe(ctx, id)
	if err != nil {
		return runtime.Snapshot{}, err
	}
	if !st.Phase.Alive() {
		return runtime.Snapshot{}, fmt.Errorf("sandbox is %s, not running or paused: nothing to snapshot", st.Phase)
	}
	var m forkManifest
	err = runtime.WriteLiveSnapshot(dir, func(tmp string) (werr error) {
		m, werr = r.writeLiveSnapshot(ctx, id, st.Phase, tmp)
		return werr
	})
	if err != nil {
		return runtime.Snapshot{}, err
	}
	r.log.Info("sandbox snapshotted, left running", "sandbox", id, "dir", dir, "kind", m.Kind, "size", m.SizeBytes)
	return m.snapshot(dir), nil
}

// writeLiveSnapshot writes the live snapshot of the sandbox, in phase,
// into the empty directory tmp and leaves it in that phase again.
func (r *Runtime) writeLiveSnapshot(ctx context.Context, id model.SandboxID, phase runtime.Phase, tmp string) (m forkManifest, err error) {
	dirs := r.dirs(id)
	wasPaused := phase == runtime.PhasePaused
	runsc := r.flavor == FlavorRunsc
	// Back to the phase it was in, whatever happens below.
	paused := wasPaused
	defer func() {
		bg := context.WithoutCancel(ctx)
		switch {
		case paused && !wasPaused:
			if rerr := r.resume(bg, id); rerr != nil {
				err = errors.Join(err, fmt.Errorf("resume the source: %w", rerr))
			}
		case !paused && wasPaused:
			if perr := r.freeze(bg, id); perr != nil {
				err = errors.Join(err, fmt.Errorf("pause the source again: %w", perr))
			}
		}
	}()
	if runsc {
		resumed, err := r.releaseForCheckpoint(ctx, id, dirs, phase)
		if resumed {
			paused = false
		}
		if err != nil {
			return m, err
		}
		defer func() {
			if rerr := r.reacquireAgentSocket(context.WithoutCancel(ctx), id, dirs); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}()
	}
	if !paused {
		if err := r.freeze(ctx, id); err != nil {
			return m, fmt.Errorf("freeze the source: %w", err)
		}
		paused = true
		if err := r.waitFrozen(ctx, id); err != nil {
			return m, fmt.Errorf("freeze the source: %w", err)
		}
	}
	start := time.Now()
	m.DiskImage = fileExists(dirs.image)
	m.Kind, m.Format = r.forkFormat()
	if err := copyForkFS(ctx, dirs, tmp, m.DiskImage); err != nil {
		return m, err
	}
	if r.ids != nil {
		rg, err := readIDRange(dirs.state)
		if err != nil {
			return m, fmt.Errorf("the source's id range: %w", err)
		}
		m.IDHost = rg.Host
	}
	r.log.Debug("snapshot: filesystem copied", "sandbox", id, "took", time.Since(start))
	if runsc {
		// Checkpointed while still paused: the memory image and the
		// copied files are of one instant (a file renamed in between
		// would be missing on restore).
		cp := filepath.Join(tmp, checkpointName)
		if err := os.Mkdir(cp, 0o700); err != nil {
			return m, err
		}
		start := time.Now()
		if _, err := r.runNet(ctx, r.joinsNetns(id), "checkpoint", "--leave-running", "--image-path", cp, id.String()); err != nil {
			return m, fmt.Errorf("checkpoint: %w", err)
		}
		r.log.Debug("runsc checkpoint --leave-running", "sandbox", id, "took", time.Since(start))
	}
	m.CreatedAt = time.Now().UTC()
	if m.SizeBytes, err = blocksUnder(tmp); err != nil {
		return m, err
	}
	if err := writeManifest(filepath.Join(tmp, snapshotManifestName), m); err != nil {
		return m, err
	}
	return m, syncTree(tmp)
}

// copyForkFS syncs the frozen sandbox's filesystem and copies it into
// the snapshot directory tmp: its disk image (sparsely), or its upper
// layer.
func copyForkFS(ctx context.Context, dirs sandboxDirs, tmp string, image bool) error {
	if err := syncFS(dirs.fs); err != nil {
		return err
	}
	if !image {
		if _, err := treecopy.Tree(ctx, dirs.upper, filepath.Join(tmp, forkUpperName), treecopy.Options{}); err != nil {
			return fmt.Errorf("copy the upper layer: %w", err)
		}
		return nil
	}
	return copyFile(ctx, dirs.image, filepath.Join(tmp, forkImageName))
}

// syncFS writes back the filesystem that holds path (the sandbox's
// mounted disk image), so its image file on the host is consistent.
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// copyFile copies the regular file src to the new file dst, keeping holes.
func copyFile(ctx context.Context, src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := treecopy.File(ctx, out, in, fi.Size()); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// LiveSnapshotsPortable implements runtime.PortableSnapshots: a live
// snapshot is its manifest (no paths), the copied filesystem (owners of
// the source's id range, which a fork shifts from) and runsc's checkpoint
// image, restored into a new container whatever its paths.
func (r *Runtime) LiveSnapshotsPortable() bool { return true }

func readForkManifest(dir string) (forkManifest, error) {
	return runtime.ReadSnapshotManifest[forkManifest](dir, snapshotManifestName)
}

// RemoveSnapshot implements runtime.LiveSnapshotter.
func (r *Runtime) RemoveSnapshot(_ context.Context, dir string) error {
	return runtime.RemoveSnapshotDir(dir, snapshotManifestName)
}

// checkFrom checks that spec.From is a live snapshot of this runtime's
// format, complete, and that spec asks for what it was taken with.
func (r *Runtime) checkFrom(spec runtime.Spec) (forkManifest, error) {
	snap := spec.From
	kind, format := r.forkFormat()
	if snap.Format != format || snap.Kind != kind {
		return forkManifest{}, fmt.Errorf("a %s snapshot in format %q cannot be forked by %s (it forks %s snapshots in format %q): %w",
			snap.Kind, snap.Format, r.flavor, kind, format, runtime.ErrNotSupported)
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
	if m.Format != format || m.Kind != kind {
		return m, fmt.Errorf("the snapshot at %s is a %s snapshot in format %q: %w", snap.Location, m.Kind, m.Format, runtime.ErrNotSupported)
	}
	if want := spec.Resources.DiskBytes > 0; want != m.DiskImage {
		return m, fmt.Errorf("the snapshot was taken with disk image %v, the spec asks for %v", m.DiskImage, want)
	}
	return m, nil
}

// createFrom is Create with spec.From, under the new sandbox's lock, with
// no container: the snapshot's filesystem is copied into the sandbox's
// state directory, then runc and crun create a container over it (Start
// boots a fresh agent) and runsc restores the checkpoint into it (it runs
// after Create). It reports whether the sandbox was started. A failure
// removes what the attempt made.
func (r *Runtime) createFrom(ctx context.Context, spec runtime.Spec, dirs sandboxDirs) (started bool, err error) {
	m, err := r.checkFrom(spec)
	if err != nil {
		return false, err
	}
	if pristine, err := r.pristine(spec.ID); err != nil {
		return false, err
	} else if !pristine {
		if err := r.removeLeftovers(ctx, spec.ID); err != nil {
			return false, fmt.Errorf("clean up a previous attempt: %w", err)
		}
	}
	defer func() {
		if err != nil {
			if cerr := r.removeLeftovers(context.WithoutCancel(ctx), spec.ID); cerr != nil {
				r.log.Error("clean up after a failed fork", "sandbox", spec.ID, "err", cerr)
			}
		}
	}()
	if err := os.MkdirAll(dirs.fs, 0o700); err != nil {
		return false, err
	}
	start := time.Now()
	if m.DiskImage {
		if err := copyFile(ctx, filepath.Join(spec.From.Location, forkImageName), dirs.image); err != nil {
			return false, err
		}
	} else if _, err := treecopy.Tree(ctx, filepath.Join(spec.From.Location, forkUpperName), dirs.upper, treecopy.Options{}); err != nil {
		return false, fmt.Errorf("copy the snapshot's upper layer: %w", err)
	}
	r.log.Debug("fork: filesystem copied", "sandbox", spec.ID, "took", time.Since(start))
	if r.flavor != FlavorRunsc {
		return r.create(ctx, spec, dirs)
	}
	if err := r.prepare(ctx, spec, dirs); err != nil {
		return false, err
	}
	if spec.Network != nil {
		if err := readdressNetns(spec.Network); err != nil {
			return false, fmt.Errorf("prepare the network for the restore: %w", err)
		}
	}
	start = time.Now()
	if err := r.runDetached(ctx, dirs.agentLog, netnsOf(spec), "restore", "--detach",
		"--image-path", filepath.Join(spec.From.Location, checkpointName),
		"--bundle", dirs.bundle, "--pid-file", dirs.pidFile, spec.ID.String()); err != nil {
		return false, fmt.Errorf("runsc restore: %w", err)
	}
	r.log.Debug("fork: runsc restore", "sandbox", spec.ID, "took", time.Since(start))
	if err := r.reacquireAgentSocket(ctx, spec.ID, dirs); err != nil {
		return false, fmt.Errorf("restored agent: %w", err)
	}
	return true, writeFileAtomic(filepath.Join(dirs.state, restoredName), nil)
}

// adoptForkedFS makes the filesystem copied from a live snapshot the new
// sandbox's, once mounted (prepare, before the overlay): the overlay's
// work directory starts empty, the source agent's socket file goes, and
// with a user namespace every file owned by an id of the source's range
// is given the same id of the new range (chown clears setuid and setgid,
// which are set again).
func adoptForkedFS(spec runtime.Spec, dirs sandboxDirs, ids *rootfs.IDRange) error {
	m, err := readForkManifest(spec.From.Location)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dirs.work); err != nil {
		return err
	}
	if err := os.Mkdir(dirs.work, 0o700); err != nil {
		return err
	}
	if err := giveToRoot(ids, dirs.work); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dirs.run, socketName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if ids == nil || m.IDHost == 0 || m.IDHost == ids.Host {
		return nil
	}
	return shiftOwners(dirs.fs, m.IDHost, ids.Host)
}

// shiftOwners gives every file below root owned by an id in [from,
// from+IDRangeSize) the id at the same offset from to.
func shiftOwners(root string, from, to uint32) error {
	shift := func(id uint32) (int, bool) {
		if id >= from && uint64(id) < uint64(from)+IDRangeSize {
			return int(id - from + to), true
		}
		return int(id), false
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		uid, su := shift(st.Uid)
		gid, sg := shift(st.Gid)
		if !su && !sg {
			return nil
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("shift the owner of %s: %w", p, err)
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 && fi.Mode().IsRegular() {
			if err := os.Chmod(p, fi.Mode()); err != nil {
				return err
			}
		}
		return nil
	})
}
