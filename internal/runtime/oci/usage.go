package oci

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Usage implements runtime.UsageReader: CPU time and memory from the
// sandbox's cgroup (runc, crun and runsc alike: gVisor's sentry and gofer
// run in it), disk from statfs of its disk image, mounted at its
// filesystem directory. A sandbox without its own disk (no disk limit)
// reports none: its writable layer shares the state directory's
// filesystem, whose numbers are not its own.
func (r *Runtime) Usage(ctx context.Context, id model.SandboxID) (runtime.Usage, error) {
	cg, err := r.cgroupPath(id)
	if err != nil {
		return runtime.Usage{}, err
	}
	cu, err := r.cgroups.Usage(cg)
	if errors.Is(err, os.ErrNotExist) {
		return runtime.Usage{}, fmt.Errorf("usage of %s: no cgroup: %w", id, runtime.ErrNotFound)
	}
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of %s: %w", id, err)
	}
	u := runtime.Usage{CPU: cu.CPU, MemUsed: cu.Memory, MemCache: cu.Cache}
	dirs := r.dirs(id)
	var fs, state unix.Stat_t
	if err := unix.Stat(dirs.fs, &fs); errors.Is(err, os.ErrNotExist) {
		return runtime.Usage{}, fmt.Errorf("usage of %s: no filesystem: %w", id, runtime.ErrNotFound)
	} else if err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of %s: %w", id, err)
	}
	if err := unix.Stat(dirs.state, &state); err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of %s: %w", id, err)
	}
	if fs.Dev != state.Dev { // the disk image is mounted there
		var st unix.Statfs_t
		if err := unix.Statfs(dirs.fs, &st); err != nil {
			return runtime.Usage{}, fmt.Errorf("usage of %s: statfs of its disk: %w", id, err)
		}
		bs := int64(st.Bsize)
		// The image's size is the disk limit plus metaSize (the agent's
		// run directory): total and used as the guest's df shows them.
		u.DiskTotal = int64(st.Blocks) * bs
		u.DiskUsed = (int64(st.Blocks) - int64(st.Bfree)) * bs
	}
	return u, nil
}

var _ runtime.UsageReader = (*Runtime)(nil)
