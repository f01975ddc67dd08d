package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// Snapshot is what a Suspend wrote: a typed handle that the store records
// (model.Snapshot) and that Spec.Restore hands back to the runtime.
type Snapshot struct {
	// Kind says whether processes survive (memory) or only the root
	// filesystem's changes (filesystem).
	Kind model.SnapshotKind
	// Format is the runtime's own name of its layout, e.g.
	// "runsc-checkpoint/1" or "oci-upper/1"; a runtime refuses formats it
	// does not know.
	Format string
	// Location is where the runtime keeps the snapshot on this node (a
	// path it owns; removed by Delete).
	Location  string
	SizeBytes int64
	CreatedAt time.Time
}

// Suspender is the method set of CapCheckpoint and CapFilesystemSnapshot.
type Suspender interface {
	// Suspend snapshots a running or paused sandbox and frees what it
	// holds while running (its processes, their memory, its cgroup and
	// mounts); what the snapshot needs stays, until Delete. The sandbox
	// is then not found by State (it has no container), but List still
	// names it. Suspending a suspended sandbox returns its snapshot again.
	// A runtime claiming CapCheckpoint writes a SnapshotMemory; one
	// claiming only CapFilesystemSnapshot a SnapshotFilesystem (one
	// claiming both writes a SnapshotFilesystem on request:
	// FilesystemSuspender).
	Suspend(ctx context.Context, id model.SandboxID) (Snapshot, error)
	// ForgetSnapshot removes the snapshot of a sandbox that was restored
	// from it (Create with Spec.Restore) and runs again: the waker calls
	// it once the sandbox answers, so a wake that fails before can be
	// tried again from the same snapshot. It does nothing to a sandbox
	// that is not alive.
	ForgetSnapshot(ctx context.Context, id model.SandboxID) error
}

// AsSuspender returns rt's suspend method if rt claims CapCheckpoint or
// CapFilesystemSnapshot, and an error wrapping ErrNotSupported otherwise.
func AsSuspender(rt Runtime) (Suspender, error) {
	info := rt.Info()
	if !info.Capabilities.Has(CapCheckpoint) && !info.Capabilities.Has(CapFilesystemSnapshot) {
		return nil, fmt.Errorf("suspend on %s: %w", info.Name, ErrNotSupported)
	}
	s, ok := rt.(Suspender)
	if !ok {
		return nil, fmt.Errorf("suspend on %s: claims a snapshot capability without implementing runtime.Suspender: %w", info.Name, ErrNotSupported)
	}
	return s, nil
}

// FilesystemSuspender is implemented by a runtime claiming both
// CapCheckpoint and CapFilesystemSnapshot: its Suspend keeps memory, and
// SuspendFilesystem keeps only the root filesystem's changes (processes are
// not kept; a wake boots a fresh agent over the kept files).
type FilesystemSuspender interface {
	// SuspendFilesystem is Suspend writing a SnapshotFilesystem: the
	// sandbox's processes stop without a checkpoint, its filesystem
	// stays. The same idempotence holds: a sandbox already suspended
	// returns its snapshot (of whichever kind it is), and a suspend that
	// stopped half-way is finished.
	SuspendFilesystem(ctx context.Context, id model.SandboxID) (Snapshot, error)
}

// SuspendAs suspends sandbox id on rt writing a snapshot of kind ("": the
// runtime's own, SnapshotKindOf); a kind rt cannot write wraps
// ErrNotSupported.
func SuspendAs(ctx context.Context, rt Runtime, id model.SandboxID, kind model.SnapshotKind) (Snapshot, error) {
	s, err := AsSuspender(rt)
	if err != nil {
		return Snapshot{}, err
	}
	info := rt.Info()
	if kind == "" || kind == SnapshotKindOf(info.Capabilities) {
		return s.Suspend(ctx, id)
	}
	if !slices.Contains(SuspendKinds(info.Capabilities), kind) {
		return Snapshot{}, fmt.Errorf("a %s suspend on %s: %w", kind, info.Name, ErrNotSupported)
	}
	fs, ok := rt.(FilesystemSuspender)
	if !ok {
		return Snapshot{}, fmt.Errorf("a filesystem suspend on %s: claims %s and %s without implementing runtime.FilesystemSuspender: %w", info.Name, CapCheckpoint, CapFilesystemSnapshot, ErrNotSupported)
	}
	return fs.SuspendFilesystem(ctx, id)
}

// SnapshotKindOf is the kind of snapshot a runtime with these capabilities
// writes ("" if none).
func SnapshotKindOf(c Capabilities) model.SnapshotKind {
	if kinds := SuspendKinds(c); len(kinds) > 0 {
		return kinds[0]
	}
	return ""
}

// SuspendKinds are the kinds of snapshot a suspend on a runtime with these
// capabilities can be asked to write, its own (SnapshotKindOf) first; none:
// it cannot suspend. CapCheckpoint writes memory; CapFilesystemSnapshot the
// filesystem only (beside CapCheckpoint: on request, FilesystemSuspender).
// This is the one place that says which suspend keeps what: SuspendAs
// and the API's checks (keep_memory, a deadline's suspend) read it.
func SuspendKinds(c Capabilities) []model.SnapshotKind {
	var out []model.SnapshotKind
	if c.Has(CapCheckpoint) {
		out = append(out, model.SnapshotMemory)
	}
	if c.Has(CapFilesystemSnapshot) {
		out = append(out, model.SnapshotFilesystem)
	}
	return out
}

// LiveSnapshotter is the method set of CapLiveSnapshot.
type LiveSnapshotter interface {
	// SnapshotRunning writes a snapshot of a running or paused sandbox
	// into dir, leaving the sandbox as it was (running, or paused):
	// its processes go on, its files and state directory are not
	// changed. dir must not exist (its parent must); it is written under
	// a temporary name and renamed once complete, so dir either holds a
	// complete snapshot or does not exist. A dir that already holds a
	// complete snapshot is returned as it is (a retried call). The
	// snapshot depends on nothing of the source sandbox: deleting the
	// source keeps it usable.
	SnapshotRunning(ctx context.Context, id model.SandboxID, dir string) (Snapshot, error)
	// RemoveSnapshot removes a snapshot SnapshotRunning wrote at dir (and
	// the temporary directory of one that stopped half-way). Removing an
	// absent one is a no-op.
	RemoveSnapshot(ctx context.Context, dir string) error
}

// PortableSnapshots is implemented by a LiveSnapshotter whose snapshots
// hold nothing of their node (no host path, no reference to the source's
// files): their directory, copied to the same place below another node's
// snapshot directory, makes sandboxes there as well (given the template).
// Such snapshots may be kept in the shared blob store.
type PortableSnapshots interface {
	LiveSnapshotsPortable() bool
}

// LiveSnapshotsPortable reports whether rt's live snapshots may move
// between nodes (PortableSnapshots).
func LiveSnapshotsPortable(rt Runtime) bool {
	p, ok := rt.(PortableSnapshots)
	return ok && p.LiveSnapshotsPortable()
}

// AsLiveSnapshotter returns rt's live snapshot methods if rt claims
// CapLiveSnapshot, and an error wrapping ErrNotSupported otherwise.
func AsLiveSnapshotter(rt Runtime) (LiveSnapshotter, error) {
	info := rt.Info()
	if !info.Capabilities.Has(CapLiveSnapshot) {
		return nil, fmt.Errorf("snapshot of a running sandbox on %s: %w", info.Name, ErrNotSupported)
	}
	s, ok := rt.(LiveSnapshotter)
	if !ok {
		return nil, fmt.Errorf("snapshot of a running sandbox on %s: claims %s without implementing runtime.LiveSnapshotter: %w", info.Name, CapLiveSnapshot, ErrNotSupported)
	}
	return s, nil
}

// SnapshotTempSuffix is appended to a live snapshot's directory while it
// is being written: a directory with it is a snapshot that a crash cut
// short, which nothing refers to and a reconciler removes.
const SnapshotTempSuffix = ".tmp"

// RemoveSnapshotDir removes a live snapshot's directory dir and what a
// crash left of writing it (dir+SnapshotTempSuffix), the file manifest (its
// runtime's record of a complete snapshot) first, so that a crash half-way
// leaves no snapshot that looks complete. dir must be absolute and clean.
func RemoveSnapshotDir(dir, manifest string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("remove snapshot: directory %q must be absolute and clean", dir)
	}
	if err := os.Remove(filepath.Join(dir, manifest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove snapshot: %w", err)
	}
	for _, d := range []string{dir, dir + SnapshotTempSuffix} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("remove snapshot: %w", err)
		}
	}
	return nil
}

// ReadSnapshotManifest reads a snapshot's JSON manifest, the file name in
// dir (an fs.ErrNotExist error when there is none).
func ReadSnapshotManifest[M any](dir, name string) (M, error) {
	var m M
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// ExistingLiveSnapshot is the start of every LiveSnapshotter's
// SnapshotRunning: it checks id and dir (absolute and clean) and has read
// return the manifest of a snapshot already complete at dir (a retry of
// one that succeeded; read's fs.ErrNotExist: none); found says whether
// there is one.
func ExistingLiveSnapshot[M any](id model.SandboxID, dir string, read func(dir string) (M, error)) (m M, found bool, err error) {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return m, false, fmt.Errorf("snapshot: %w", err)
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return m, false, fmt.Errorf("snapshot of %s: directory %q must be absolute and clean", id, dir)
	}
	m, err = read(dir)
	switch {
	case err == nil:
		return m, true, nil
	case errors.Is(err, fs.ErrNotExist):
		return m, false, nil
	}
	return m, false, fmt.Errorf("snapshot of %s: %w", id, err)
}

// WriteLiveSnapshot has write fill a fresh temporary directory
// (dir+SnapshotTempSuffix; whatever a crash left there is removed first)
// and, once write succeeded, renames it to dir and syncs dir's parent: a
// live snapshot is at dir complete or not at all. The temporary directory
// is removed when anything fails.
func WriteLiveSnapshot(dir string, write func(tmp string) error) (err error) {
	tmp := dir + SnapshotTempSuffix
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := os.RemoveAll(tmp); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove the failed snapshot: %w", rerr))
			}
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	parent, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer parent.Close()
	return parent.Sync()
}
