package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// Delete removes every trace of the sandbox: the container, its processes,
// the overlay mount, the sandbox's filesystem and its loop device, its cgroups (in every hierarchy) and its state
// directory. It is a no-op for a sandbox that does not exist, and it cleans
// up every partial state a crash can leave (a state directory without a
// container, a container without one, a mount or cgroup without either, a
// runtime state file the runtime can no longer read, …).
func (r *Runtime) Delete(ctx context.Context, id model.SandboxID) error {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	unlock := r.lock(id)
	defer unlock()
	if err := r.removeLeftovers(ctx, id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	return nil
}

// removeLeftovers is Delete without the lock. Each step tolerates the
// previous ones having happened already.
func (r *Runtime) removeLeftovers(ctx context.Context, id model.SandboxID) error {
	if err := r.removeContainer(ctx, id); err != nil {
		return err
	}
	cg, err := r.cgroupPath(id)
	if err != nil {
		return err
	}
	// 4–7. Mounts, loop devices, cgroups, the state directory, the id range.
	return r.removeHostState(ctx, r.dirs(id).state, cg, id.String())
}

// removeContainer kills every process of the sandbox and removes its
// container from the runtime (steps 1–3 of removeLeftovers), leaving its
// state directory, mounts and cgroup directories to the caller: Delete
// removes them, Suspend keeps the sandbox's own filesystem.
func (r *Runtime) removeContainer(ctx context.Context, id model.SandboxID) error {
	cg, err := r.cgroupPath(id)
	if err != nil {
		return err
	}
	// 1. The container, through the runtime. Both fail harmlessly when it
	//    is already gone.
	_, _ = r.run(ctx, "kill", "--all", id.String(), "KILL")
	_, delErr := r.run(ctx, "delete", "--force", id.String())

	// 2. Every process left in the sandbox's cgroups: those of a container
	//    the runtime could not delete, or of a create that crashed before
	//    the runtime recorded the container.
	killCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := r.cgroups.Kill(killCtx, cg); err != nil {
		return err
	}

	// 3. Runtime state the runtime itself cannot remove (e.g. a state file
	//    it can no longer parse). Nothing of the container runs any more.
	if files, err := r.runtimeFiles(id); err != nil {
		return err
	} else if len(files) > 0 {
		if _, err := r.run(ctx, "delete", "--force", id.String()); err != nil {
			r.log.Warn("the runtime cannot delete the container; removing its state files", "sandbox", id, "files", files, "err", errors.Join(delErr, err))
			for _, f := range files {
				if err := os.RemoveAll(f); err != nil {
					return fmt.Errorf("remove runtime state: %w", err)
				}
			}
		}
	}
	if files, err := r.runtimeFiles(id); err != nil {
		return err
	} else if len(files) > 0 {
		return fmt.Errorf("runtime state left after delete: %q (%v)", files, delErr)
	}
	return nil
}

// removeHostState removes what a sandbox (or the probe) named name left on
// the host once nothing of its container runs: the mounts below its state
// directory dir (never removing files across a mount point), loop devices
// bound to images there, its cgroups, the directory, and its user
// namespace's id range.
func (r *Runtime) removeHostState(ctx context.Context, dir string, cg cgroups.Path, name string) error {
	if err := r.unmountAll(ctx, dir); err != nil {
		return err
	}
	if err := r.cgroups.Remove(ctx, cg); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove state dir: %w", err)
	}
	// Nothing owned by the id range is left: the sandbox could write only
	// below its state directory.
	if r.ids != nil {
		r.ids.release(name)
	}
	return nil
}

// unmountAll unmounts everything mounted below dir, deepest first, and
// unbinds the loop devices of images there.
func (r *Runtime) unmountAll(ctx context.Context, dir string) error {
	mounts, err := rootfs.MountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := rootfs.Unmount(ctx, r.log, m); err != nil {
			return err
		}
	}
	if left, err := rootfs.MountsUnder(dir); err != nil {
		return err
	} else if len(left) > 0 {
		return fmt.Errorf("still mounted after unmount: %q", left)
	}
	// The loop device of a disk image clears itself once unmounted; one left
	// bound (by a process that died holding it, or by a mount namespace on
	// its way out) is detached or set to clear.
	return rootfs.DetachLoopDevices(dir)
}

// runtimeFiles returns the runtime's own state files for the container id
// under RootDir: runc and crun keep a directory RootDir/<id>; runsc keeps
// RootDir/<id>_sandbox:<sandbox id>.{state,lock} and a control socket
// RootDir/runsc-<id>.sock.
func (r *Runtime) runtimeFiles(id model.SandboxID) ([]string, error) {
	var patterns []string
	switch r.flavor {
	case FlavorRunsc:
		patterns = []string{id.String() + "_sandbox:*", "runsc-" + id.String() + ".sock"}
	default:
		patterns = []string{id.String()}
	}
	var out []string
	for _, p := range patterns {
		m, err := filepath.Glob(filepath.Join(r.rootDir, p))
		if err != nil {
			return nil, fmt.Errorf("runtime state files: %w", err)
		}
		out = append(out, m...)
	}
	return out, nil
}

// runtimeIDs lists the sandbox IDs that have runtime state files.
func (r *Runtime) runtimeIDs() ([]model.SandboxID, error) {
	entries, err := os.ReadDir(r.rootDir)
	if err != nil {
		return nil, fmt.Errorf("read runtime root: %w", err)
	}
	var ids []model.SandboxID
	for _, e := range entries {
		name := e.Name()
		if r.flavor == FlavorRunsc {
			var ok bool
			if name, _, ok = strings.Cut(name, "_sandbox:"); !ok {
				continue
			}
		} else if !e.IsDir() {
			continue
		}
		if id, err := model.ParseSandboxID(name); err == nil && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// known reports whether the runtime has a container with this ID: it lists
// it, or it keeps state files for it (which it may fail to read).
func (r *Runtime) known(ctx context.Context, id model.SandboxID) (bool, error) {
	files, err := r.runtimeFiles(id)
	if err != nil || len(files) > 0 {
		return len(files) > 0, err
	}
	ids, err := r.listContainers(ctx)
	if err != nil {
		return false, err
	}
	return slices.Contains(ids, id), nil
}

// listContainers returns what `<runtime> list` reports plus every ID with
// runtime state files (a runtime may fail to list a container whose state
// it cannot read, or crun may fail to list anything at all).
func (r *Runtime) listContainers(ctx context.Context) ([]model.SandboxID, error) {
	ids, err := r.runtimeIDs()
	if err != nil {
		return nil, err
	}
	out, lerr := r.run(ctx, "list", "--quiet")
	if lerr != nil {
		r.log.Warn("the runtime cannot list its containers; using its state files", "err", lerr)
		return ids, nil
	}
	listed, _ := ParseList(string(out))
	for _, id := range listed {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// List returns every sandbox the runtime knows and every sandbox state
// directory under StateRoot (which includes leftovers of crashed creates).
func (r *Runtime) List(ctx context.Context) ([]model.SandboxID, error) {
	ids, err := r.listContainers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	entries, err := os.ReadDir(r.stateRoot)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	for _, e := range entries {
		id, err := model.ParseSandboxID(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
