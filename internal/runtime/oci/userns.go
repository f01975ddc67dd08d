package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/userns"
)

// User namespaces of runc and crun sandboxes: each sandbox gets its own
// range of IDRangeSize host uids and gids (the same numbers for both), in
// which its root is the range's first id. Ranges are taken from a pool of
// Count ranges starting at Base and are recorded in the sandbox's state
// directory (file idrange), so a restarted server finds them again; a range
// is free again once Delete has removed the state directory.
const (
	// IDRangeSize is the number of uids (and gids) of one sandbox: 0–65535
	// inside, like a Linux system.
	IDRangeSize = 65536
	// DefaultIDBase is the first host id of the pool: 2^30, far above the
	// ids of a host's users and of /etc/subuid's usual ranges (100000…).
	DefaultIDBase = 1 << 30
	// DefaultIDRanges is the pool's size: 2^30 ids, so the pool ends at
	// 2^31 (ids from 2^31 on are treated as negative by some tools).
	DefaultIDRanges = 1 << 14
)

// idPoolRules are the id pool's (Config.IDPool) defaults and bounds: a
// block is one sandbox's range of IDRangeSize ids, and no host id below
// one range (host root, the host's users) is in it.
var idPoolRules = runtime.IDPoolRules{What: "oci: id pool", Base: DefaultIDBase, Count: DefaultIDRanges, BlockSize: IDRangeSize, MinBase: IDRangeSize}

// idAllocator hands out the ranges of an id pool. One Runtime value owns a
// state root; the allocator learns the ranges in use from the state
// directories when the Runtime is made.
type idAllocator struct {
	pool runtime.IDPool
	mu   sync.Mutex
	used map[string]uint32 // sandbox (or probe) name → first host id
}

func newIDAllocator(pool runtime.IDPool) *idAllocator {
	return &idAllocator{pool: pool, used: map[string]uint32{}}
}

// rangeFile is the name of the file in a state directory that records the
// sandbox's range: "<first host id> <size>\n".
const rangeFile = "idrange"

// load records the ranges found in the state directories under stateRoot.
func (a *idAllocator) load(stateRoot string) error {
	entries, err := os.ReadDir(stateRoot)
	if err != nil {
		return fmt.Errorf("read state root: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		r, err := readIDRange(filepath.Join(stateRoot, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		a.used[e.Name()] = r.Host
	}
	return nil
}

// allocate returns name's range: the one recorded in stateDir if there is
// one, else a free range of the pool, which it records there (stateDir must
// exist).
func (a *idAllocator) allocate(name, stateDir string) (rootfs.IDRange, error) {
	if r, err := readIDRange(stateDir); err == nil {
		a.mu.Lock()
		a.used[name] = r.Host
		a.mu.Unlock()
		return r, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return rootfs.IDRange{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	taken := make(map[uint32]bool, len(a.used))
	for n, h := range a.used {
		if n != name {
			taken[h] = true
		}
	}
	for i := range a.pool.Count {
		host := a.pool.Block(i, IDRangeSize)
		if taken[host] {
			continue
		}
		r := rootfs.IDRange{Host: host, Size: IDRangeSize}
		if err := writeFileAtomic(filepath.Join(stateDir, rangeFile), []byte(fmt.Sprintf("%d %d\n", r.Host, r.Size))); err != nil {
			return rootfs.IDRange{}, fmt.Errorf("record id range: %w", err)
		}
		a.used[name] = host
		return r, nil
	}
	return rootfs.IDRange{}, fmt.Errorf("all %d id ranges of the pool from %d are in use", a.pool.Count, a.pool.Base)
}

// release frees name's range; call it once nothing of the sandbox is left.
func (a *idAllocator) release(name string) {
	a.mu.Lock()
	delete(a.used, name)
	a.mu.Unlock()
}

func readIDRange(stateDir string) (rootfs.IDRange, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, rangeFile))
	if err != nil {
		return rootfs.IDRange{}, err
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return rootfs.IDRange{}, fmt.Errorf("%s/%s: malformed id range %q", stateDir, rangeFile, data)
	}
	host, err1 := strconv.ParseUint(f[0], 10, 32)
	size, err2 := strconv.ParseUint(f[1], 10, 32)
	r := rootfs.IDRange{Host: uint32(host), Size: uint32(size)}
	if err := errors.Join(err1, err2); err != nil || !r.Valid() {
		return rootfs.IDRange{}, fmt.Errorf("%s/%s: malformed id range %q", stateDir, rangeFile, data)
	}
	return r, nil
}

// usesUserns reports whether the flavor's sandboxes get a user namespace of
// Airlock's making: runc and crun. gVisor's sentry runs the guest in a user
// namespace of its own and drops its host privileges itself.
func usesUserns(f Flavor) bool { return f != FlavorRunsc }

// addUserns adds a user namespace mapping r to the spec: the one
// bind-mounted at path if path is not "" (a sandbox's, see sandboxUserns),
// else a new one the runtime makes (owned by host root). The maps are given
// in both cases: runc 1.1 wants them with a namespace to join too, and
// they are that namespace's.
//
// runc sets the process's rlimits from outside (prlimit(2) on the
// container's first process), which in a namespace host root does not own
// takes CAP_SYS_RESOURCE; where the server runs without it (in a container
// of its own) runc is given none and the guest inherits the server's
// (crun sets them from inside, which needs nothing as long as no hard
// limit is raised: nofileLimit is at most the host's).
func addUserns(flavor Flavor, s *specs.Spec, r rootfs.IDRange, path string) {
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: r.Host, Size: r.Size}}
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: path})
	s.Linux.UIDMappings = m
	s.Linux.GIDMappings = m
	if path != "" && flavor == FlavorRunc && !haveCapSysResource() {
		s.Process.Rlimits = nil
	}
}

// haveCapSysResource reports whether this process has CAP_SYS_RESOURCE
// in its effective set.
func haveCapSysResource() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) != 0
}

// idRange returns the id range of the sandbox (or probe) name whose
// directories are dirs, allocating it if need be, and prepares the state
// directory for it (prepareUserns); nil for runsc. dirs.state must exist.
// The sandbox's own filesystem is given to its root by prepareStorage.
func (r *Runtime) idRange(name string, dirs sandboxDirs) (*rootfs.IDRange, error) {
	if r.ids == nil {
		return nil, nil
	}
	rg, err := r.ids.allocate(name, dirs.state)
	if err != nil {
		return nil, err
	}
	if err := r.prepareUserns(dirs, rg); err != nil {
		return nil, err
	}
	return &rg, nil
}

// prepareUserns lets the sandbox's mapped root reach what is its own below
// the state directory: the runtime resolves the paths of the root
// filesystem and of the bind mounts (the run directory on the sandbox's
// filesystem; the shared agent file, agentfs.go) as the sandbox's root, so
// the state directory is searchable by the sandbox's group (mode 0710,
// group the range's first gid) and by nobody else. dirs.lower is created
// for the idmapped view of the template.
func (r *Runtime) prepareUserns(dirs sandboxDirs, ids rootfs.IDRange) error {
	if err := os.MkdirAll(dirs.lower, 0o700); err != nil {
		return err
	}
	if err := os.Chown(dirs.state, 0, int(ids.Host)); err != nil {
		return fmt.Errorf("let the sandbox's root reach its state directory: %w", err)
	}
	if err := os.Chmod(dirs.state, 0o710); err != nil {
		return fmt.Errorf("let the sandbox's root reach its state directory: %w", err)
	}
	return nil
}

// giveToRoot makes the sandbox's mapped root the owner of each path (nil
// ids: nothing to do). What the sandbox's root must own on its own
// filesystem: the filesystem's root directory, the overlay's upper
// directory (the sandbox's "/", and every file it writes) and work
// directory, and the agent's directory and run directory, where the agent
// creates its socket (the host reaches it as host root).
func giveToRoot(ids *rootfs.IDRange, paths ...string) error {
	if ids == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Lchown(p, int(ids.Host), int(ids.Host)); err != nil {
			return fmt.Errorf("give %s to the sandbox's root: %w", p, err)
		}
	}
	return nil
}

// stateRootSearchable makes stateRoot searchable (not readable) by everyone
// (mode 0711) and checks that its ancestors are: a sandbox's mapped root is
// not host root, and the runtime resolves the sandbox's root filesystem and
// run directory below stateRoot as that user. Each sandbox's own directory
// is closed to all but its own group (prepareUserns).
func stateRootSearchable(stateRoot string) error {
	if err := os.Chmod(stateRoot, 0o711); err != nil {
		return fmt.Errorf("oci: state root: %w", err)
	}
	for dir := filepath.Dir(stateRoot); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("oci: state root: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("oci: %s (mode %v) must be searchable by others (chmod o+x): runc and crun sandboxes run as an unprivileged host user that must reach their root filesystem under the state root %s", dir, fi.Mode().Perm(), stateRoot)
		}
		if dir == "/" {
			return nil
		}
	}
}

// usernsFile is the name of the file in a state directory on which the
// sandbox's user namespace is bind-mounted (runc and crun).
const usernsFile = "userns"

// Each runc or crun sandbox's user namespace is made by Airlock, owned by
// the host uid its root maps to (the range's first id), and the runtime
// joins it (namespace path): the kernel's per-user counters of everything
// the sandbox does are charged in the host's namespace to that uid, the
// sandbox's own, instead of to host root (who creates the namespaces of
// runc and crun otherwise), so the host's per-user limits
// (fs.inotify.max_user_instances, …) are per sandbox. The namespace's own
// limits (usernsLimits) bound it further. It stays alive, bind-mounted on
// the state directory's usernsFile, from the sandbox's first mount to its
// Delete (or Suspend), which unmount it with the state directory's other
// mounts.

// usernsLimits are the limits of a sandbox's user namespace: what all of
// its processes may hold together, whatever their uid inside
// (docs/security.md, "Per-sandbox kernel budgets").
func usernsLimits() userns.Limits {
	return userns.Limits{
		Sysctls: map[userns.Sysctl]int64{
			userns.MaxInotifyInstances: 128,
			userns.MaxInotifyWatches:   65536,
			userns.MaxFanotifyGroups:   16,
			userns.MaxFanotifyMarks:    8192,
			// runc and crun create one namespace of each kind (but user)
			// in it; the sandbox holds no CAP_SYS_ADMIN to make more.
			userns.MaxUserNamespaces:   0,
			userns.MaxMntNamespaces:    8,
			userns.MaxPidNamespaces:    8,
			userns.MaxNetNamespaces:    8,
			userns.MaxIpcNamespaces:    8,
			userns.MaxUtsNamespaces:    8,
			userns.MaxCgroupNamespaces: 8,
			userns.MaxTimeNamespaces:   8,
		},
		Rlimits: map[userns.Rlimit]uint64{
			userns.RlimitSigpending: sandboxSigpending,
			userns.RlimitMsgqueue:   sandboxMsgqueue,
		},
	}
}

// The sandbox's ceilings of pending signals and of POSIX message queue
// bytes, all its users together (the kernel checks each process's own
// RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE too, which the guest inherits):
// Linux's default message queue budget of one user, and signals for a
// sandbox of a thousand processes.
const (
	sandboxSigpending = 8192
	sandboxMsgqueue   = 819200
)

// sandboxUserns returns the sandbox's user namespace, bind-mounted on
// dirs' usernsFile: the one there, or a new one (after a Suspend, a
// reboot, or on the first mount). helper is the agent's binary (which
// makes user namespaces, see userns.Create).
func (r *Runtime) sandboxUserns(ctx context.Context, dirs sandboxDirs, ids rootfs.IDRange, helper string) (*os.File, error) {
	path := dirs.usernsPath
	if f, err := os.Open(path); err == nil {
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &st); err == nil && st.Type == unix.NSFS_MAGIC {
			if err := userns.Check(f, ids.Host); err == nil {
				return f, nil
			} else {
				r.log.Warn("replacing a sandbox's user namespace", "path", path, "err", err)
			}
		}
		f.Close()
		if err := rootfs.Unmount(ctx, r.log, path); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ns, err := userns.Create(ctx, helper, userns.Mapping{Host: ids.Host, Size: ids.Size}, usernsLimits())
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		ns.Close()
		return nil, err
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", ns.Fd()), path, "", unix.MS_BIND, ""); err != nil {
		ns.Close()
		return nil, fmt.Errorf("keep the sandbox's user namespace: bind-mount it on %s: %w", path, err)
	}
	return ns, nil
}

// runcInheritsNetns reports whether the sandbox's runtime is runc in a user
// namespace of Airlock's making, which cannot join a prepared network
// namespace by the spec: runc joins the user namespace first and the
// network namespace after, which the sandbox's user namespace does not own
// (setns fails with EPERM; crun joins it first). The spec has no network
// namespace then, and runDetached starts runc in the prepared one, which
// the container inherits.
func (r *Runtime) runcInheritsNetns() bool {
	return r.flavor == FlavorRunc && r.ids != nil
}

// inheritNetns removes the network namespace from a runc spec whose
// container inherits runc's (runcInheritsNetns).
func inheritNetns(s *specs.Spec) {
	s.Linux.Namespaces = slices.DeleteFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
		return ns.Type == specs.NetworkNamespace
	})
}

// netnsOf is the prepared network namespace of spec, "" for none.
func netnsOf(spec runtime.Spec) string {
	if spec.Network == nil {
		return ""
	}
	return spec.Network.NetnsPath
}
