package qemu

import (
	"path/filepath"

	"github.com/airlockdev/airlock/internal/model"
)

// Inspection hooks for tests and tools: where a sandbox's artifacts are
// on the host.

// DiskPath is the host path of a sandbox's root disk image (the file that
// holds its writes; a base snapshot's or a suspend's frozen layer below it
// is not the sandbox's own).
func (r *Runtime) DiskPath(id model.SandboxID) string { return filepath.Join(r.dir(id), diskFile) }

// VMPid is the pid of the sandbox's QEMU, or 0 when none runs.
func (r *Runtime) VMPid(id model.SandboxID) int { return vmPid(r.dir(id), id.String()) }
