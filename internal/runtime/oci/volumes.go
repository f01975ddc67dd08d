package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// volumesDir is the directory of a sandbox's state directory where the
// idmapped views of its volumes are attached (runc, crun).
func (d sandboxDirs) volumesDir() string { return filepath.Join(d.state, "volumes") }

// mountVolumes prepares the sandbox's volumes and returns the bind mounts
// of its bundle. With a user namespace (runc, crun) each volume's
// directory is attached below the state directory through an idmapped,
// writable view in the sandbox's own user namespace: the volume's files,
// owned on disk by ids 0–65535 as the guest writes them, appear to the
// sandbox's ids (its root is its range's first host id) as their own, and
// what it writes lands on disk under the guest's ids, so the next sandbox
// (another range) sees the same owners. These views are below the state
// directory: every unmount of it (delete, suspend) takes them away, and a
// restore mounts them again. Without one (runsc) the gofer, host root,
// serves the directory itself, whose owners are the guest's ids already.
func (r *Runtime) mountVolumes(ctx context.Context, spec runtime.Spec, dirs sandboxDirs, ids *rootfs.IDRange, agent string) ([]specs.Mount, error) {
	if len(spec.Volumes) == 0 {
		return nil, nil
	}
	var out []specs.Mount
	if ids == nil {
		for _, v := range spec.Volumes {
			if !filepath.IsAbs(v.Source) {
				return nil, fmt.Errorf("volume source %q must be absolute", v.Source)
			}
			out = append(out, volumeMount(v.Source, string(v.Target)))
		}
		return out, nil
	}
	if err := os.MkdirAll(dirs.volumesDir(), 0o700); err != nil {
		return nil, err
	}
	if err := giveToRoot(ids, dirs.volumesDir()); err != nil {
		return nil, err
	}
	userns, err := r.sandboxUserns(ctx, dirs, *ids, agent)
	if err != nil {
		return nil, err
	}
	defer userns.Close()
	for i, v := range spec.Volumes {
		if !filepath.IsAbs(v.Source) {
			return nil, fmt.Errorf("volume source %q must be absolute", v.Source)
		}
		at := filepath.Join(dirs.volumesDir(), strconv.Itoa(i))
		if err := os.MkdirAll(at, 0o700); err != nil {
			return nil, err
		}
		mounted, err := rootfs.IsMounted(at)
		if err != nil {
			return nil, err
		}
		if !mounted {
			if err := rootfs.MountIDMappedWritable(v.Source, at, userns); err != nil {
				return nil, fmt.Errorf("volume at %s: %w", v.Target, err)
			}
		}
		out = append(out, volumeMount(at, string(v.Target)))
	}
	return out, nil
}

func volumeMount(source, target string) specs.Mount {
	return specs.Mount{Destination: target, Type: "bind", Source: source, Options: []string{"rbind", "rw", "nosuid", "nodev"}}
}
