package oci

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

var _ runtime.LayerReader = (*Runtime)(nil)

// WritableLayer implements runtime.LayerReader: the overlay's upper
// directory (on the sandbox's disk image, mounted while the sandbox has a
// container, with a disk limit) and, for runc and crun in a user
// namespace, the sandbox's id range (runsc has none: its files keep the
// guest's owners).
func (r *Runtime) WritableLayer(id model.SandboxID) (runtime.Layer, error) {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return runtime.Layer{}, fmt.Errorf("writable layer: %w", err)
	}
	dirs := r.dirs(id)
	if !dirExists(dirs.upper) {
		return runtime.Layer{}, fmt.Errorf("writable layer of %s: %w", id, runtime.ErrNotFound)
	}
	l := runtime.Layer{Dir: dirs.upper}
	rg, err := readIDRange(dirs.state)
	switch {
	case err == nil:
		l.IDs = &runtime.LayerIDs{Host: rg.Host, Size: rg.Size}
	case !errors.Is(err, fs.ErrNotExist):
		return runtime.Layer{}, fmt.Errorf("writable layer of %s: %w", id, err)
	}
	return l, nil
}
