// Package cgroups finds the host's cgroup hierarchies (cgroup v1, hybrid or
// pure v2), maps a cgroup path onto a directory in each of them, and reads
// the few values Airlock needs: limits, the current task count and the OOM
// kill counter. It also kills and removes a cgroup's leftovers, so a deleted
// sandbox leaves no cgroup behind in any controller.
//
// It creates a sandbox's cgroups and applies their limits only in one case:
// the child cgroup with a pids limit that a sandbox's agent, in a user
// namespace, may move its workload into but not change (DelegatePids). The
// OCI runtime makes the sandbox's own cgroup.
package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"

	"github.com/airlockdev/airlock/internal/procfs"
)

// removeBusyTimeout bounds how long Remove retries a cgroup the kernel still
// reports busy after its last process exited.
const removeBusyTimeout = 3 * time.Second

// Layout is how the host mounts cgroups.
type Layout string

// Layouts.
const (
	// LayoutV1: only cgroup v1 hierarchies.
	LayoutV1 Layout = "v1"
	// LayoutHybrid: v1 controller hierarchies plus a cgroup2 hierarchy
	// (usually at /sys/fs/cgroup/unified) that holds few or no controllers.
	LayoutHybrid Layout = "hybrid"
	// LayoutV2: one cgroup2 hierarchy at /sys/fs/cgroup (the unified layout).
	LayoutV2 Layout = "v2"
)

// DefaultMountPoint is where the cgroup filesystems live.
const DefaultMountPoint = "/sys/fs/cgroup"

// Path is a cgroup's path relative to each hierarchy's root, such as
// "/airlock/sbx_…": absolute and clean.
type Path string

// ParsePath parses s as a cgroup path.
func ParsePath(s string) (Path, error) {
	switch {
	case !strings.HasPrefix(s, "/"):
		return "", fmt.Errorf("cgroup path %q must be absolute", s)
	case path.Clean(s) != s:
		return "", fmt.Errorf("cgroup path %q must be clean", s)
	case strings.ContainsRune(s, 0):
		return "", fmt.Errorf("cgroup path %q contains NUL", s)
	}
	return Path(s), nil
}

// Join returns the child cgroup name below p. name must be one path element.
func (p Path) Join(name string) (Path, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", fmt.Errorf("cgroup name %q must be one path element", name)
	}
	return Path(path.Join(string(p), name)), nil
}

func (p Path) String() string { return string(p) }

// Hierarchy is one mounted cgroup hierarchy.
type Hierarchy struct {
	Version     int      // 1 or 2
	MountPoint  string   // where it is mounted
	Root        string   // the cgroup mounted there (not "/" inside a cgroup namespace or a bind mount)
	Controllers []string // v1: from the superblock options, including "name=…" hierarchies; v2: cgroup.controllers of the mount's root
}

// Has reports whether the hierarchy carries controller.
func (h Hierarchy) Has(controller string) bool {
	for _, c := range h.Controllers {
		if c == controller {
			return true
		}
	}
	return false
}

// Dir returns the directory of cgroup p in this hierarchy.
func (h Hierarchy) Dir(p Path) string {
	rel := string(p)
	if h.Root != "/" {
		if r, ok := strings.CutPrefix(rel, h.Root); ok && (r == "" || strings.HasPrefix(r, "/")) {
			rel = r
		}
	}
	return filepath.Join(h.MountPoint, rel)
}

// Host is the cgroup setup of this host, as seen from this process's mount
// namespace.
type Host struct {
	Layout      Layout
	Hierarchies []Hierarchy
}

// Detect reads /proc/self/mountinfo and each cgroup2 root's controller list.
func Detect() (Host, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return Host{}, fmt.Errorf("detect cgroups: %w", err)
	}
	return FromMounts(mounts, func(dir string) ([]string, error) {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			return nil, err
		}
		return strings.Fields(string(data)), nil
	})
}

// v1Option reports superblock options of a v1 cgroup mount that are not
// controller names.
func v1Option(o string) bool {
	switch o {
	case "rw", "ro", "noprefix", "clone_children", "xattr", "cpuset_v2_mode", "favordynmods", "nofavordynmods":
		return true
	}
	return false
}

// FromMounts builds the Host from a mount table; controllersOf reads the
// controller list of a cgroup2 directory.
func FromMounts(mounts []mountinfo.Mount, controllersOf func(dir string) ([]string, error)) (Host, error) {
	var host Host
	seen := map[[2]int]bool{} // a hierarchy mounted twice is listed once
	v2AtDefault := false
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		dev := [2]int{m.Major, m.Minor}
		if seen[dev] {
			continue
		}
		seen[dev] = true
		h := Hierarchy{MountPoint: m.MountPoint, Root: m.Root}
		if m.FSType == "cgroup2" {
			h.Version = 2
			ctrls, err := controllersOf(m.MountPoint)
			if err != nil {
				return Host{}, fmt.Errorf("detect cgroups: controllers of %s: %w", m.MountPoint, err)
			}
			h.Controllers = ctrls
			if m.MountPoint == DefaultMountPoint {
				v2AtDefault = true
			}
		} else {
			h.Version = 1
			for _, o := range strings.Split(m.SuperOptions, ",") {
				if o != "" && !v1Option(o) && !strings.HasPrefix(o, "release_agent=") {
					h.Controllers = append(h.Controllers, o)
				}
			}
		}
		host.Hierarchies = append(host.Hierarchies, h)
	}
	var v1, v2 int
	for _, h := range host.Hierarchies {
		if h.Version == 1 {
			v1++
		} else {
			v2++
		}
	}
	switch {
	case v2AtDefault || v1 == 0 && v2 > 0:
		host.Layout = LayoutV2
	case v1 > 0 && v2 > 0:
		host.Layout = LayoutHybrid
	case v1 > 0:
		host.Layout = LayoutV1
	default:
		return Host{}, errors.New("detect cgroups: no cgroup filesystem is mounted")
	}
	return host, nil
}

// Unified returns the cgroup2 hierarchy, if there is one.
func (h Host) Unified() (Hierarchy, bool) {
	for _, x := range h.Hierarchies {
		if x.Version == 2 {
			return x, true
		}
	}
	return Hierarchy{}, false
}

// Dirs returns the directory of cgroup p in every hierarchy (v1 controllers,
// named v1 hierarchies and the cgroup2 hierarchy).
func (h Host) Dirs(p Path) []string {
	out := make([]string, 0, len(h.Hierarchies))
	for _, x := range h.Hierarchies {
		out = append(out, x.Dir(p))
	}
	return out
}

// ErrNoController is returned when no hierarchy carries a controller.
var ErrNoController = errors.New("cgroup controller not available")

// ControllerDir returns the directory of cgroup p in the hierarchy that
// carries controller: a v1 hierarchy if one has it, otherwise the cgroup2
// hierarchy when it lists it (or, on a pure v2 host, always).
func (h Host) ControllerDir(controller string, p Path) (string, error) {
	for _, x := range h.Hierarchies {
		if x.Version == 1 && x.Has(controller) {
			return x.Dir(p), nil
		}
	}
	for _, x := range h.Hierarchies {
		if x.Version == 2 && (x.Has(controller) || h.Layout == LayoutV2) {
			return x.Dir(p), nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrNoController, controller)
}

// Existing returns the directories of cgroup p that exist, in any hierarchy.
func (h Host) Existing(p Path) ([]string, error) {
	var out []string
	for _, d := range h.Dirs(p) {
		fi, err := os.Stat(d)
		switch {
		case err == nil && fi.IsDir():
			out = append(out, d)
		case err == nil, errors.Is(err, os.ErrNotExist):
		default:
			return nil, fmt.Errorf("stat cgroup %s: %w", d, err)
		}
	}
	return out, nil
}

// Exists reports whether cgroup p exists in any hierarchy.
func (h Host) Exists(p Path) (bool, error) {
	dirs, err := h.Existing(p)
	return len(dirs) > 0, err
}

// Remove removes cgroup p and every cgroup below it from every hierarchy,
// deepest first. It fails at once if live processes are still inside (see
// Kill). Removing a cgroup that does not exist is a no-op.
func (h Host) Remove(ctx context.Context, p Path) error {
	if p == "/" {
		return errors.New("remove cgroup: refusing to remove the root cgroup")
	}
	dirs, err := h.Existing(p)
	if err != nil || len(dirs) == 0 {
		return err
	}
	procs, err := h.Procs(p)
	if err != nil {
		return err
	}
	for _, pid := range procs {
		if procfs.Alive(pid) {
			return fmt.Errorf("remove cgroup %s: process %d is still inside", p, pid)
		}
	}
	deadline := time.Now().Add(removeBusyTimeout)
	var errs []error
	for _, d := range dirs {
		if err := removeTree(ctx, d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
