package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
)

// DefaultWorkloadCgroup is the name of the child cgroup that holds every
// process the agent starts when a pids limit is set.
const DefaultWorkloadCgroup = "airlock-workload"

// PidsCgroupOptions configure SetupPidsCgroup.
type PidsCgroupOptions struct {
	// Max is the pids.max of the workload cgroup; it must be > 0.
	Max int64
	// Name of the child cgroup; "" means DefaultWorkloadCgroup.
	Name string
	// Parent is the cgroup directory to create the child in; "" means the
	// agent's own pids cgroup, found via /proc/self/mountinfo and
	// /proc/self/cgroup (cgroup v1 pids hierarchy, else cgroup v2).
	Parent string
}

// PidsCgroup is a cgroup with a pids limit that processes join.
type PidsCgroup struct {
	Dir     string // absolute directory of the cgroup
	Version int    // 1 or 2
}

// Remove deletes the cgroup directory; it fails while processes are in it.
func (c PidsCgroup) Remove() error {
	if err := unix.Rmdir(c.Dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", c.Dir, err)
	}
	return nil
}

// SetupPidsCgroup creates (or reuses) a child cgroup with pids.max set, for
// the agent's workload. On cgroup v2 it enables the pids controller in the
// parent's cgroup.subtree_control first. The agent itself stays where it is.
//
// A cgroup the host prepared is reused without being created or changed:
// in a user namespace (runc, crun) the host makes the workload cgroup, sets
// its pids.max and gives the sandbox's root only its cgroup.procs and tasks
// (and, on cgroup v2, moves the agent into its AgentCgroup leaf and enables
// pids for the children itself); SetupPidsCgroup then only checks that the
// limit is Max.
func SetupPidsCgroup(opts PidsCgroupOptions) (PidsCgroup, error) {
	if opts.Max <= 0 {
		return PidsCgroup{}, fmt.Errorf("pids cgroup: max must be > 0, got %d", opts.Max)
	}
	name := opts.Name
	if name == "" {
		name = DefaultWorkloadCgroup
	}
	if name != filepath.Base(name) || name == "." || name == ".." {
		return PidsCgroup{}, fmt.Errorf("pids cgroup: bad name %q", name)
	}
	parent, version := opts.Parent, 0
	if parent == "" {
		var err error
		parent, version, err = discoverPidsCgroup()
		if err != nil {
			return PidsCgroup{}, err
		}
	} else {
		var st unix.Statfs_t
		if err := unix.Statfs(parent, &st); err != nil {
			return PidsCgroup{}, fmt.Errorf("pids cgroup: statfs %s: %w", parent, err)
		}
		switch st.Type {
		case unix.CGROUP2_SUPER_MAGIC:
			version = 2
		case unix.CGROUP_SUPER_MAGIC:
			version = 1
		default:
			return PidsCgroup{}, fmt.Errorf("pids cgroup: %s is not a cgroup filesystem", parent)
		}
	}
	if version == 2 {
		if err := enablePidsV2(parent); errors.Is(err, unix.EBUSY) {
			// gVisor (Linux does not, for pids) refuses a controller in the
			// subtree_control of a cgroup that has processes: the agent
			// moves to a leaf of its own first.
			if err := joinLeaf(parent, AgentCgroup); err != nil {
				return PidsCgroup{}, err
			}
			err = enablePidsV2(parent)
			if err != nil {
				return PidsCgroup{}, err
			}
		} else if err != nil {
			return PidsCgroup{}, err
		}
	}
	dir := filepath.Join(parent, name)
	// A cgroup the host prepared (a sandbox in a user namespace, whose root
	// may not create cgroups) is used as it is: mkdir would fail there
	// even for an existing directory once the mount is read-only.
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			return PidsCgroup{}, fmt.Errorf("pids cgroup: create %s: %w", dir, err)
		}
	}
	if err := setPidsMax(dir, opts.Max); err != nil {
		return PidsCgroup{}, err
	}
	return PidsCgroup{Dir: dir, Version: version}, nil
}

// setPidsMax sets dir's pids.max to max. Where the agent may not write it
// (the host prepared the cgroup and kept its limit to itself) it succeeds
// only if the limit already is max.
func setPidsMax(dir string, max int64) error {
	file := filepath.Join(dir, "pids.max")
	limit := strconv.FormatInt(max, 10)
	werr := os.WriteFile(file, []byte(limit), 0o644)
	if werr == nil {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("pids cgroup: set pids.max=%s in %s: %w (read: %w)", limit, dir, werr, err)
	}
	if got := strings.TrimSpace(string(data)); got != limit {
		return fmt.Errorf("pids cgroup: set pids.max=%s in %s: %w (it is %q)", limit, dir, werr, got)
	}
	return nil
}

// AgentCgroup is the cgroup v2 leaf, next to the workload cgroup, that
// the agent moves itself into where its own cgroup may not both hold
// processes and enable controllers for children (gVisor).
const AgentCgroup = "airlock-agent"

// joinLeaf moves this process (all its threads) into parent/name, created
// if missing.
func joinLeaf(parent, name string) error {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("pids cgroup: create %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("pids cgroup: move the agent into %s: %w", dir, err)
	}
	return nil
}

// enablePidsV2 turns on the pids controller for the children of parent.
// pids is a threaded controller, so this works even though the agent itself
// lives in parent.
func enablePidsV2(parent string) error {
	ctrl, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("pids cgroup: %w", err)
	}
	if !slices.Contains(strings.Fields(string(ctrl)), "pids") {
		return fmt.Errorf("pids cgroup: the pids controller is not available in %s (cgroup.controllers: %q)", parent, strings.TrimSpace(string(ctrl)))
	}
	sub, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("pids cgroup: %w", err)
	}
	if slices.Contains(strings.Fields(string(sub)), "pids") {
		return nil
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0o644); err != nil {
		return fmt.Errorf("pids cgroup: enable +pids in %s/cgroup.subtree_control: %w", parent, err)
	}
	return nil
}

// discoverPidsCgroup finds the directory of this process's pids cgroup.
func discoverPidsCgroup() (dir string, version int, err error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return "", 0, fmt.Errorf("pids cgroup: %w", err)
	}
	cg, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", 0, fmt.Errorf("pids cgroup: %w", err)
	}
	defer cg.Close()
	groups, err := parseProcCgroup(cg)
	if err != nil {
		return "", 0, fmt.Errorf("pids cgroup: /proc/self/cgroup: %w", err)
	}
	dir, version, err = findPidsCgroup(mounts, groups, func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.IsDir()
	})
	return parentOfAgentLeaf(dir, version), version, err
}

// parentOfAgentLeaf returns the cgroup the agent's workload cgroup belongs
// in, given the agent's own: on cgroup v2, an agent already in its leaf
// AgentCgroup (moved there by the host before it started, or by an earlier
// run of itself) makes its workload cgroup next to the leaf, in the
// leaf's parent.
func parentOfAgentLeaf(dir string, version int) string {
	if version == 2 && filepath.Base(dir) == AgentCgroup {
		return filepath.Dir(dir)
	}
	return dir
}

// procCgroup is one line of /proc/self/cgroup: "ID:CONTROLLERS:PATH".
type procCgroup struct {
	Controllers []string // empty for cgroup v2 ("0::/path")
	Path        string
}

func parseProcCgroup(r io.Reader) ([]procCgroup, error) {
	var out []procCgroup
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("line %d: want ID:CONTROLLERS:PATH", n)
		}
		if _, err := strconv.Atoi(parts[0]); err != nil {
			return nil, fmt.Errorf("line %d: bad hierarchy ID %q", n, parts[0])
		}
		var ctrl []string
		if parts[1] != "" {
			ctrl = strings.Split(parts[1], ",")
		}
		out = append(out, procCgroup{Controllers: ctrl, Path: parts[2]})
	}
	return out, sc.Err()
}

// findPidsCgroup locates the pids cgroup of the process described by groups
// in mounts: the cgroup v1 pids hierarchy if there is one (hybrid hosts),
// else the cgroup v2 hierarchy. When the process's cgroup path is not
// visible under the mount (e.g. a container without a cgroup namespace), the
// mount point itself is used.
func findPidsCgroup(mounts []mountinfo.Mount, groups []procCgroup, isDir func(string) bool) (string, int, error) {
	resolve := func(m mountinfo.Mount, cgPath string) string {
		var rel string
		switch {
		case m.Root == "/":
			rel = cgPath
		case cgPath == m.Root || strings.HasPrefix(cgPath, m.Root+"/"):
			rel = cgPath[len(m.Root):]
		default:
			return m.MountPoint
		}
		dir := filepath.Join(m.MountPoint, rel)
		if dir != m.MountPoint && !strings.HasPrefix(dir, strings.TrimSuffix(m.MountPoint, "/")+"/") || !isDir(dir) {
			return m.MountPoint
		}
		return dir
	}
	for _, g := range groups {
		if !slices.Contains(g.Controllers, "pids") {
			continue
		}
		for _, m := range mounts {
			if m.FSType == "cgroup" && m.HasSuperOption("pids") {
				return resolve(m, g.Path), 1, nil
			}
		}
	}
	for _, g := range groups {
		if len(g.Controllers) != 0 {
			continue
		}
		for _, m := range mounts {
			if m.FSType == "cgroup2" {
				return resolve(m, g.Path), 2, nil
			}
		}
	}
	return "", 0, errors.New("pids cgroup: no cgroup v1 pids hierarchy and no cgroup v2 hierarchy is mounted")
}
