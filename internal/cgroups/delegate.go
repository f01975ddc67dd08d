package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PidsDelegation describes the child cgroup with a pids limit that
// DelegatePids prepares below a cgroup for the cgroup's own, unprivileged
// processes (a sandbox's agent in a user namespace): they may move
// processes into the child, and nothing else.
type PidsDelegation struct {
	// Child is the name of the limited child cgroup.
	Child string
	// Leaf is the name of the child cgroup that, on cgroup v2, the
	// cgroup's own processes are moved into: a cgroup v2 cgroup that
	// enables a controller for its children holds no processes itself.
	// Unused on cgroup v1.
	Leaf string
	// Max is the child's pids.max; it must be > 0.
	Max int64
	// UID and GID own the files through which processes join the child
	// (and, on cgroup v2, the cgroup's own cgroup.procs, see DelegatePids).
	UID, GID int
}

// DelegatePids prepares, below the existing cgroup p, the child cgroup d
// describes in the hierarchy that carries the pids controller, and returns
// the child's directory. It is idempotent.
//
//   - It creates the child (owned by root: only root can create cgroups
//     in it) and sets its pids.max to d.Max (owned by root: only root can
//     change it).
//   - It gives d.UID:d.GID the child's cgroup.procs (and, on cgroup v1,
//     tasks): the only files the delegate must write to move a process in.
//   - On cgroup v2 it first moves every process of p into d.Leaf and then
//     enables pids in p's cgroup.subtree_control, so that p holds no
//     process itself (the no-internal-processes rule), and gives d.UID
//     p's cgroup.procs too: cgroup v2 lets a process be moved only by a
//     writer of the cgroup.procs of the common ancestor of its source and
//     destination (p, for a move from d.Leaf into d.Child). That gives the
//     delegate no way out of d.Child: a move into p fails with EBUSY while
//     p enables a controller for its populated children, and d.Leaf's
//     cgroup.procs stays root's.
//
// The delegate's limit holds against anything it can do with the files it
// owns: it can only move processes (whose credentials it matches) between
// p's children and into d.Child.
func (h Host) DelegatePids(p Path, d PidsDelegation) (string, error) {
	if d.Max <= 0 {
		return "", fmt.Errorf("delegate pids cgroup: max must be > 0, got %d", d.Max)
	}
	child, err := p.Join(d.Child)
	if err != nil {
		return "", fmt.Errorf("delegate pids cgroup: %w", err)
	}
	parentDir, err := h.ControllerDir("pids", p)
	if err != nil {
		return "", fmt.Errorf("delegate pids cgroup: %w", err)
	}
	if fi, err := os.Stat(parentDir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("delegate pids cgroup: cgroup %s: not a directory (%v)", parentDir, err)
	}
	childDir, _ := h.ControllerDir("pids", child)
	owned := []string{filepath.Join(childDir, "cgroup.procs")}
	if h.isV1("pids") {
		if err := mkCgroup(childDir); err != nil {
			return "", err
		}
		owned = append(owned, filepath.Join(childDir, "tasks"))
	} else {
		leaf, err := p.Join(d.Leaf)
		if err != nil {
			return "", fmt.Errorf("delegate pids cgroup: %w", err)
		}
		leafDir, _ := h.ControllerDir("pids", leaf)
		if err := mkCgroup(leafDir); err != nil {
			return "", err
		}
		if err := mkCgroup(childDir); err != nil {
			return "", err
		}
		if err := moveProcs(parentDir, leafDir); err != nil {
			return "", err
		}
		if err := enableController(parentDir, "pids"); err != nil {
			return "", err
		}
		// A runtime may have delegated p itself to the delegate (crun
		// chowns a container's cgroup v2 directory and its delegatable
		// files to the container's root): take back what would let it
		// create cgroups or change p's controllers.
		for _, f := range []string{parentDir, filepath.Join(parentDir, "cgroup.subtree_control"), filepath.Join(parentDir, "cgroup.threads")} {
			if err := os.Lchown(f, 0, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("delegate pids cgroup: %w", err)
			}
		}
		owned = append(owned, filepath.Join(parentDir, "cgroup.procs"))
	}
	limit := strconv.FormatInt(d.Max, 10)
	if err := os.WriteFile(filepath.Join(childDir, "pids.max"), []byte(limit), 0o644); err != nil {
		return "", fmt.Errorf("delegate pids cgroup: set pids.max=%s in %s: %w", limit, childDir, err)
	}
	for _, f := range owned {
		if err := os.Chown(f, d.UID, d.GID); err != nil {
			return "", fmt.Errorf("delegate pids cgroup: %w", err)
		}
	}
	return childDir, nil
}

// mkCgroup creates the cgroup directory dir unless it exists.
func mkCgroup(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("delegate pids cgroup: create %s: %w", dir, err)
	}
	return nil
}

// moveProcs moves every process of the cgroup v2 directory from into to,
// until none is left (a process may fork while it is moved).
func moveProcs(from, to string) error {
	for range 100 {
		data, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("delegate pids cgroup: %w", err)
		}
		pids := strings.Fields(string(data))
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			err := os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(pid), 0o644)
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delegate pids cgroup: move process %s from %s into %s: %w", pid, from, to, err)
			}
		}
	}
	return fmt.Errorf("delegate pids cgroup: processes keep appearing in %s", from)
}

// enableController enables controller for the children of the cgroup v2
// directory dir.
func enableController(dir, controller string) error {
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("delegate pids cgroup: %w", err)
	}
	if !slices.Contains(strings.Fields(string(ctrl)), controller) {
		return fmt.Errorf("delegate pids cgroup: the %s controller is not available in %s (cgroup.controllers: %q)", controller, dir, strings.TrimSpace(string(ctrl)))
	}
	sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("delegate pids cgroup: %w", err)
	}
	if slices.Contains(strings.Fields(string(sub)), controller) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+controller), 0o644); err != nil {
		return fmt.Errorf("delegate pids cgroup: enable +%s in %s/cgroup.subtree_control: %w", controller, dir, err)
	}
	return nil
}
