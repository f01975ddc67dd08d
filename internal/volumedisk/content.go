package volumedisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/volumefs"
)

// The volume content API reads and writes a volume through its host
// mount: Content mounts the volume if no sandbox of the node has (the
// same mount sandboxes bind, so both see each other's writes at once) and
// holds it while the call runs; UnmountIdle unmounts a volume that no
// call held for an idle period and no sandbox mounts.

// contentUse is the content API's use of one volume.
type contentUse struct {
	calls int       // calls holding it now
	last  time.Time // when the last call ended, or when UnmountIdle first saw it mounted
}

// Content mounts the volume (an image of sizeMiB the first time) unless
// it is mounted, and opens its files for the content API. The volume
// stays mounted until release is called (once), and after that until
// UnmountIdle finds it idle.
func (m *Manager) Content(ctx context.Context, id model.VolumeID, sizeMiB int) (*volumefs.Root, func(), error) {
	m.mu.Lock()
	u := m.content[id]
	if u == nil {
		u = &contentUse{}
		m.content[id] = u
	}
	u.calls++ // before the mount: UnmountIdle leaves it alone from now on
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		u.calls--
		u.last = time.Now()
		m.mu.Unlock()
	}
	data, err := m.Mount(ctx, id, sizeMiB)
	if err != nil {
		release()
		return nil, nil, err
	}
	staging := filepath.Join(filepath.Dir(data), stagingDirName)
	if err := os.Mkdir(staging, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		release() // a volume mounted by an older server has none yet
		return nil, nil, fmt.Errorf("volume %s: %w", id, err)
	}
	root, err := volumefs.Open(data, staging)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("volume %s: %w", id, err)
	}
	return root, func() {
		root.Close()
		release()
	}, nil
}

// UnmountIdle unmounts the node's mounted volumes that no content call
// has held for idle (a volume mounted by sandboxes counts from the first
// time UnmountIdle saw it) and that inUse says no sandbox mounts. inUse
// runs under the volume's lock, which Mount takes too: a sandbox that
// the store records before its node mounts the volume either keeps it
// mounted or mounts it again afterwards. It returns the volumes
// unmounted.
func (m *Manager) UnmountIdle(ctx context.Context, idle time.Duration, now time.Time, inUse func(context.Context, model.VolumeID) (bool, error)) ([]model.VolumeID, error) {
	ids, err := m.List()
	if err != nil {
		return nil, err
	}
	var (
		out  []model.VolumeID
		errs []error
	)
	for _, id := range ids {
		_, mounted, err := m.Mounted(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !mounted {
			m.forget(id)
			continue
		}
		if !m.idle(id, idle, now) {
			continue
		}
		done, err := m.unmountIfIdle(ctx, id, idle, now, inUse)
		if err != nil {
			errs = append(errs, err)
		} else if done {
			out = append(out, id)
		}
	}
	return out, errors.Join(errs...)
}

// idle reports whether the content API left volume id alone for idle
// before now, starting its clock if it has none.
func (m *Manager) idle(id model.VolumeID, idle time.Duration, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.content[id]
	if u == nil {
		m.content[id] = &contentUse{last: now}
		return false
	}
	return u.calls == 0 && now.Sub(u.last) >= idle
}

// forget drops an unmounted volume's record, unless a call holds it.
func (m *Manager) forget(id model.VolumeID) {
	m.mu.Lock()
	if u := m.content[id]; u != nil && u.calls == 0 {
		delete(m.content, id)
	}
	m.mu.Unlock()
}

func (m *Manager) unmountIfIdle(ctx context.Context, id model.VolumeID, idle time.Duration, now time.Time, inUse func(context.Context, model.VolumeID) (bool, error)) (bool, error) {
	unlock := m.lock(id)
	defer unlock()
	if !m.idle(id, idle, now) {
		return false, nil // a call came meanwhile
	}
	used, err := inUse(ctx, id)
	if err != nil || used {
		return false, err
	}
	_, _, fs := m.paths(id)
	if err := rootfs.Unmount(ctx, m.log, fs); err != nil {
		return false, fmt.Errorf("unmount idle volume %s: %w", id, err)
	}
	m.forget(id)
	m.log.InfoContext(ctx, "idle volume unmounted", "volume", id)
	return true, nil
}

// loopFreeTimeout bounds how long Mount waits for the loop device of an
// earlier mount of the same image to be released.
const loopFreeTimeout = 5 * time.Second

// waitLoopFree waits until no loop device is backed by an image of the
// volume's directory vol: an ext4 image must never be mounted twice at
// once. After an unmount the kernel releases the device (autoclear) soon;
// one still there after loopFreeTimeout is a mount elsewhere (a lazy
// unmount that something still holds), and the mount is refused.
func waitLoopFree(ctx context.Context, vol string) error {
	deadline := time.Now().Add(loopFreeTimeout)
	for {
		devs, err := rootfs.LoopDevices(vol)
		if err != nil || len(devs) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its image is still attached to %s (in use by a mount elsewhere): not mounting it twice", devs[0].Device)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// makeStaging makes the content API's staging directory of a volume just
// mounted, emptied of what a crash left (no write runs yet).
func makeStaging(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("staging directory: %w", err)
	}
	if err := volumefs.SweepStaging(dir); err != nil {
		return fmt.Errorf("staging directory: %w", err)
	}
	return nil
}
