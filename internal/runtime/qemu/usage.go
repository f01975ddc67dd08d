package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Usage implements runtime.UsageReader: the CPU time of the VM's cgroup
// (QEMU's threads: the guest's vCPUs and, under TCG, their translation).
// Memory and disk are the guest's (Guest): the VM cgroup's memory is QEMU's
// resident set, the guest RAM it touched once plus its translation cache,
// which says little of what the guest uses now, and the disk is a
// filesystem only the guest mounts.
func (r *Runtime) Usage(ctx context.Context, id model.SandboxID) (runtime.Usage, error) {
	cg, err := cgroupOf(id.String())
	if err != nil {
		return runtime.Usage{}, err
	}
	cu, err := r.cg.Usage(cg)
	if errors.Is(err, os.ErrNotExist) {
		return runtime.Usage{}, fmt.Errorf("usage of %s: no VM cgroup: %w", id, runtime.ErrNotFound)
	}
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of %s: %w", id, err)
	}
	return runtime.Usage{CPU: cu.CPU, Guest: true}, nil
}

var _ runtime.UsageReader = (*Runtime)(nil)
