// Package volumedisk keeps the volumes of one node on its disk: each one a
// sparse ext4 image of the volume's size (its hard limit: a write beyond it
// fails with ENOSPC inside, and the host's filesystem grows by at most the
// size), loop-mounted on the host while the node uses it. The sandboxes
// that mount a volume bind (runc, crun: through an idmapped view) its data
// directory, so every sandbox of the node that mounts it shares one ext4
// mount: one kernel, one page cache, no filesystem mounted twice.
//
// Layout below the manager's directory, per volume ID:
//
//	<id>/disk.img   the image (made as disk.img.tmp, renamed once whole)
//	<id>/fs/        its mount point while mounted
//	<id>/fs/data/   what sandboxes see at their mount path (mode 0777)
//	<id>/fs/staging/ writes of the content API in progress (mode 0700)
//
// Every method is idempotent, and safe after a crash at any point: a
// half-made image is never renamed into place, a mount left behind is found
// again (Mount) or unmounted (Remove).
package volumedisk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// DataDirName is the directory of a mounted volume's filesystem that
// sandboxes see: the filesystem's root holds lost+found besides.
const DataDirName = "data"

// stagingDirName is the directory of a mounted volume's filesystem where
// the content API stages writes (internal/volumefs), beside the data
// directory: on the same filesystem, seen by no sandbox.
const stagingDirName = "staging"

// Manager keeps the volumes of one node below one directory.
type Manager struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	locks map[model.VolumeID]*volumeLock
	// content: the volumes the content API holds or held (content.go).
	content map[model.VolumeID]*contentUse
}

type volumeLock struct {
	mu    sync.Mutex
	users int
}

// New returns a manager of the volumes below dir (made 0700 if missing).
func New(dir string, logger *slog.Logger) (*Manager, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("volumes: directory %q must be absolute", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Manager{dir: dir, log: logger, locks: map[model.VolumeID]*volumeLock{}, content: map[model.VolumeID]*contentUse{}}, nil
}

// Dir is the directory the volumes are kept in.
func (m *Manager) Dir() string { return m.dir }

// lock serializes the calls about one volume; the returned func unlocks.
func (m *Manager) lock(id model.VolumeID) func() {
	m.mu.Lock()
	l := m.locks[id]
	if l == nil {
		l = &volumeLock{}
		m.locks[id] = l
	}
	l.users++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.users--; l.users == 0 {
			delete(m.locks, id)
		}
		m.mu.Unlock()
	}
}

func (m *Manager) paths(id model.VolumeID) (vol, image, fs string) {
	vol = filepath.Join(m.dir, id.String())
	return vol, filepath.Join(vol, "disk.img"), filepath.Join(vol, "fs")
}

// Mount makes the volume's filesystem (an image of sizeMiB, the first
// time) and mounts it, unless it is mounted already, and returns the host
// path of its data directory.
func (m *Manager) Mount(ctx context.Context, id model.VolumeID, sizeMiB int) (string, error) {
	if _, err := model.ParseVolumeID(id.String()); err != nil {
		return "", fmt.Errorf("mount volume: %w", err)
	}
	if _, err := model.ParseVolumeSize(int64(sizeMiB)); err != nil {
		return "", fmt.Errorf("mount volume %s: %w", id, err)
	}
	unlock := m.lock(id)
	defer unlock()
	vol, image, fs := m.paths(id)
	data := filepath.Join(fs, DataDirName)
	mounted, err := rootfs.IsMounted(fs)
	if err != nil {
		return "", fmt.Errorf("mount volume %s: %w", id, err)
	}
	if mounted {
		return data, nil
	}
	if err := os.MkdirAll(fs, 0o700); err != nil {
		return "", fmt.Errorf("mount volume %s: %w", id, err)
	}
	if _, err := os.Stat(image); errors.Is(err, os.ErrNotExist) {
		tmp := image + ".tmp"
		if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("mount volume %s: %w", id, err)
		}
		if err := rootfs.MakeJournaledImage(ctx, tmp, int64(sizeMiB)<<20); err != nil {
			return "", fmt.Errorf("make volume %s: %w", id, err)
		}
		if err := syncFile(tmp); err != nil {
			return "", fmt.Errorf("make volume %s: %w", id, err)
		}
		if err := os.Rename(tmp, image); err != nil {
			return "", fmt.Errorf("make volume %s: %w", id, err)
		}
		if err := syncFile(vol); err != nil {
			return "", fmt.Errorf("make volume %s: %w", id, err)
		}
		m.log.InfoContext(ctx, "volume made", "volume", id, "size_mib", sizeMiB)
	} else if err != nil {
		return "", fmt.Errorf("mount volume %s: %w", id, err)
	}
	if err := waitLoopFree(ctx, vol); err != nil {
		return "", fmt.Errorf("mount volume %s: %w", id, err)
	}
	if err := rootfs.MountImage(image, fs); err != nil {
		return "", fmt.Errorf("mount volume %s: %w", id, err)
	}
	if err := os.Chmod(fs, 0o700); err != nil {
		return "", m.undo(ctx, id, fs, err)
	}
	if err := os.Mkdir(data, 0o777); err == nil {
		// After the umask. Later a guest may change it (its business).
		if err := os.Chmod(data, 0o777); err != nil {
			return "", m.undo(ctx, id, fs, err)
		}
	} else if !errors.Is(err, os.ErrExist) {
		return "", m.undo(ctx, id, fs, err)
	}
	if fi, err := os.Lstat(data); err != nil || !fi.IsDir() {
		return "", m.undo(ctx, id, fs, fmt.Errorf("data directory: %v (is a directory: %v)", err, err == nil && fi.IsDir()))
	}
	if err := makeStaging(filepath.Join(fs, stagingDirName)); err != nil {
		return "", m.undo(ctx, id, fs, err)
	}
	return data, nil
}

// undo unmounts the filesystem of a Mount that failed after mounting it.
func (m *Manager) undo(ctx context.Context, id model.VolumeID, fs string, err error) error {
	if uerr := rootfs.Unmount(context.WithoutCancel(ctx), m.log, fs); uerr != nil {
		return fmt.Errorf("mount volume %s: %w (and unmount: %v)", id, err, uerr)
	}
	return fmt.Errorf("mount volume %s: %w", id, err)
}

// Mounted returns the host path of the volume's data directory if it is
// mounted on this node.
func (m *Manager) Mounted(id model.VolumeID) (string, bool, error) {
	_, _, fs := m.paths(id)
	ok, err := rootfs.IsMounted(fs)
	return filepath.Join(fs, DataDirName), ok, err
}

// Remove unmounts the volume, frees its loop device and removes its
// files: its data is gone. The caller makes sure no sandbox of this node
// mounts it any more (the store refuses to delete a volume that a sandbox
// not deleted mounts). A volume this node does not hold is a no-op.
func (m *Manager) Remove(ctx context.Context, id model.VolumeID) error {
	if _, err := model.ParseVolumeID(id.String()); err != nil {
		return fmt.Errorf("remove volume: %w", err)
	}
	unlock := m.lock(id)
	defer unlock()
	vol, _, fs := m.paths(id)
	if err := rootfs.Unmount(ctx, m.log, fs); err != nil {
		return fmt.Errorf("remove volume %s: %w", id, err)
	}
	if left, err := rootfs.MountsUnder(vol); err != nil {
		return fmt.Errorf("remove volume %s: %w", id, err)
	} else if len(left) > 0 {
		return fmt.Errorf("remove volume %s: still mounted: %q", id, left)
	}
	if err := rootfs.DetachLoopDevices(vol); err != nil {
		return fmt.Errorf("remove volume %s: %w", id, err)
	}
	if err := os.RemoveAll(vol); err != nil {
		return fmt.Errorf("remove volume %s: %w", id, err)
	}
	return nil
}

// List returns the volumes this node holds files of.
func (m *Manager) List() ([]model.VolumeID, error) {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var out []model.VolumeID
	for _, e := range entries {
		id, err := model.ParseVolumeID(e.Name())
		if err != nil {
			m.log.Warn("not a volume in the volumes directory", "name", e.Name())
			continue
		}
		out = append(out, id)
	}
	return out, nil
}

// Usage returns what a mounted volume's filesystem holds and its size, in
// bytes (ok false if it is not mounted on this node).
func (m *Manager) Usage(id model.VolumeID) (used, total int64, ok bool, err error) {
	data, ok, err := m.Mounted(id)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(data, &st); err != nil {
		return 0, 0, false, fmt.Errorf("volume %s: %w", id, err)
	}
	bs := int64(st.Bsize)
	return int64(st.Blocks-st.Bfree) * bs, int64(st.Blocks) * bs, true, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
