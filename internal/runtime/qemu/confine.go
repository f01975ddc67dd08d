package qemu

// Confinement of each VM's QEMU process on the host: a host uid and gid of
// its own (no capabilities), a cgroup of its own (memory, CPU and pids
// charged to it), and nothing reachable by path that is not the VM's.
//
// QEMU is executed as its uid (never root: its own -sandbox filter forbids
// set*id, so it could not drop root itself). It opens nothing the host did
// not hand it: the root disk and every file of its backing chain are
// descriptors (-add-fd, /dev/fdset/N, backing files named on the command
// line, never taken from a qcow2 header QEMU itself could rewrite), the QMP
// and agent sockets are listening sockets the host bound (chardev fd=N), the
// TAP device is a TUN descriptor opened by the host (-netdev tap,fd=N), and
// the kernel, initramfs and RAM file are opened by the host and reopened by
// QEMU through /proc/self/fd/N (QEMU 7.2 takes no descriptor there; the
// reopen checks the file's mode, so the kernel and initramfs are 0644 and
// the VM's own RAM file is its uid's). A base snapshot's RAM, which every
// clone maps copy-on-write, is handed as a sealed memfd (F_SEAL_WRITE): a
// clone can map it private, not change it for the others.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/filelock"
)

// Host ids of VMs: each QEMU process runs as uid = gid = one id of the
// pool, reserved for its VM until the VM's directory is removed.
const (
	// DefaultVMIDBase is the first id of the pool: 3·2^30, far above the
	// host's users and apart from the runc/crun user-namespace pool
	// (internal/runtime/oci: 2^30 up to 2^31).
	DefaultVMIDBase = 3 << 30
	// DefaultVMIDCount is the pool's size.
	DefaultVMIDCount = 1 << 16
)

// The cgroup of each VM's QEMU.
const (
	// CgroupParent holds one cgroup per VM (named as the VM: its sandbox
	// ID, or the name of a base snapshot's or a probe's VM).
	CgroupParent = "/airlock-qemu"
	// cpuPeriodMicros is the CFS period of the CPU quota (vCPUs × period).
	cpuPeriodMicros = 100000
)

// tcgCacheMiB is the size of QEMU's TCG translation cache (-accel
// tcg,tb-size=).
const tcgCacheMiB = 128

// memoryOverheadBytes is what a VM's cgroup may hold beyond the guest's
// RAM: QEMU itself (heap, device buffers), its TCG translation cache, and
// the page cache of its disk I/O (reclaimable).
func memoryOverheadBytes(a Accel) int64 {
	if a == AccelKVM {
		return 192 << 20
	}
	return 192<<20 + tcgCacheMiB<<20
}

// HostMemoryBytes is the memory.max of the host cgroup of a VM with
// memoryBytes of guest RAM under accel.
func HostMemoryBytes(memoryBytes int64, accel Accel) int64 {
	return memoryBytes + memoryOverheadBytes(accel)
}

// Names in a VM's directory for its confinement.
const (
	uidFile   = "uid"          // the VM's host id (uid = gid)
	logFIFO   = "qemu.stderr"  // QEMU's stdout and stderr: a pipe the runtime drains into qemu.log
	uidsDir   = ".uids"        // below StateRoot: one reservation file per id in use
	uidsLock  = ".uids/.lock"  // serialises reservations across processes
	logKeep   = 64 << 10       // qemu.log keeps the last logKeep bytes
	logPipeSz = 64 << 10       // the pipe holds at most this much undrained
	logDrain  = 4 * logPipeSz  // one drain reads at most this much
	memfdName = "airlock-base" // the name of base snapshots' RAM memfds
)

// owner is how a VM's directory is named in its id reservation: its path
// below StateRoot.
func (r *Runtime) owner(dir string) (string, error) {
	rel, err := filepath.Rel(r.stateRoot, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("qemu: %s is not below the state root %s", dir, r.stateRoot)
	}
	return rel, nil
}

// vmUID returns the host id of the VM whose state is in dir, reserving one
// from the pool (recorded in dir/uid) the first time.
func (r *Runtime) vmUID(ctx context.Context, dir string) (uint32, error) {
	if b, err := os.ReadFile(filepath.Join(dir, uidFile)); err == nil {
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil || !r.ids.Contains(uint32(id), 1) {
			return 0, fmt.Errorf("qemu: %s: %q is not an id of the VM pool", filepath.Join(dir, uidFile), b)
		}
		return uint32(id), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	owner, err := r.owner(dir)
	if err != nil {
		return 0, err
	}
	lock, err := r.lockUIDs(ctx)
	if err != nil {
		return 0, err
	}
	defer lock.Close()
	reserved, err := r.reservedIDs()
	if err != nil {
		return 0, err
	}
	used := make(map[uint32]bool, len(reserved))
	for _, id := range reserved {
		if r.reservationLive(id) {
			used[id] = true
		}
	}
	for i := 0; i < r.ids.Count; i++ {
		id := r.ids.Block(i, 1)
		if used[id] {
			continue
		}
		if err := atomicfile.Write(r.reservation(id), []byte(owner), 0o600); err != nil {
			return 0, err
		}
		if err := atomicfile.Write(filepath.Join(dir, uidFile), []byte(strconv.FormatUint(uint64(id), 10)), 0o600); err != nil {
			_ = os.Remove(r.reservation(id))
			return 0, err
		}
		return id, nil
	}
	return 0, fmt.Errorf("qemu: all %d VM ids from %d are in use", r.ids.Count, r.ids.Base)
}

func (r *Runtime) reservation(id uint32) string {
	return filepath.Join(r.stateRoot, uidsDir, strconv.FormatUint(uint64(id), 10))
}

func (r *Runtime) lockUIDs(ctx context.Context) (*os.File, error) {
	if err := os.MkdirAll(filepath.Join(r.stateRoot, uidsDir), 0o700); err != nil {
		return nil, err
	}
	return filelock.Lock(ctx, filepath.Join(r.stateRoot, uidsLock))
}

// reservationLive reports whether id's reservation names a directory that
// still records id (a crash between removing a VM's directory and its
// reservation leaves one that does not).
func (r *Runtime) reservationLive(id uint32) bool {
	owner, err := os.ReadFile(r.reservation(id))
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(r.stateRoot, string(owner), uidFile))
	return err == nil && strings.TrimSpace(string(b)) == strconv.FormatUint(uint64(id), 10)
}

// reservedIDs returns the ids of this runtime's pool that have a
// reservation file.
func (r *Runtime) reservedIDs() ([]uint32, error) {
	entries, err := os.ReadDir(filepath.Join(r.stateRoot, uidsDir))
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, e := range entries {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err == nil && r.ids.Contains(uint32(id), 1) {
			ids = append(ids, uint32(id))
		}
	}
	return ids, nil
}

// reservationOwners returns the owners (directories below StateRoot) of
// the ids reserved in this runtime's pool.
func (r *Runtime) reservationOwners() []string {
	ids, _ := r.reservedIDs()
	var owners []string
	for _, id := range ids {
		if b, err := os.ReadFile(r.reservation(id)); err == nil {
			owners = append(owners, string(b))
		}
	}
	return owners
}

// releaseUID frees the id of the VM whose directory was dir (called once
// the directory is gone or no longer records it).
func (r *Runtime) releaseUID(ctx context.Context, dir string, id uint32) error {
	return r.release(ctx, dir, func() ([]uint32, error) { return []uint32{id}, nil })
}

// releaseOwner frees the ids reserved for dir that it no longer records
// (dir is gone, and with it the record of its id).
func (r *Runtime) releaseOwner(ctx context.Context, dir string) error {
	return r.release(ctx, dir, r.reservedIDs)
}

// release removes, under the pool's lock, the reservations among ids()
// that name dir and that dir no longer records.
func (r *Runtime) release(ctx context.Context, dir string, ids func() ([]uint32, error)) error {
	owner, err := r.owner(dir)
	if err != nil {
		return err
	}
	lock, err := r.lockUIDs(ctx)
	if err != nil {
		return err
	}
	defer lock.Close()
	candidates, err := ids()
	if err != nil {
		return err
	}
	for _, id := range candidates {
		if b, err := os.ReadFile(r.reservation(id)); err == nil && string(b) == owner && !r.reservationLive(id) {
			if err := os.Remove(r.reservation(id)); err != nil {
				return err
			}
		}
	}
	return nil
}

// readUID is the id recorded in dir (0: none).
func readUID(dir string) uint32 {
	b, err := os.ReadFile(filepath.Join(dir, uidFile))
	if err != nil {
		return 0
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0
	}
	return uint32(id)
}

// cgroupOf is the cgroup of the VM named name.
func cgroupOf(name string) (cgroups.Path, error) {
	return cgroups.Path(CgroupParent).Join(name)
}

// cgroupJoin is how a forked QEMU lands in its cgroup: its forking thread
// joins each v1 hierarchy's cgroup first (v1Tasks: the cgroups' tasks
// files), and on cgroup v2 the child is cloned into v2Dir
// (CLONE_INTO_CGROUP). Either way QEMU allocates nothing outside it.
type cgroupJoin struct {
	v1Tasks []string
	v2Dir   string
	// back are the tasks files of the forking thread's own v1 cgroups,
	// where it goes back after the fork.
	back []string
}

// makeCgroup creates the cgroup of the VM named name with m's limits:
// memory (guest RAM plus HostMemoryBytes' overhead), CPU (m.CPUs cores)
// and pids (HostPids).
func (r *Runtime) makeCgroup(name string, m machine) (cgroupJoin, error) {
	cg, err := cgroupOf(name)
	if err != nil {
		return cgroupJoin{}, err
	}
	mem := HostMemoryBytes(m.MemoryMiB<<20, m.Accel)
	quota := int64(m.CPUs) * cpuPeriodMicros
	var join cgroupJoin
	for _, c := range r.vmControllers(cg) {
		dir, err := r.cg.ControllerDir(c, cg)
		if err != nil {
			return cgroupJoin{}, fmt.Errorf("qemu: cgroup of %s: %w", name, err)
		}
		v1 := r.cg.IsV1(c)
		if !v1 {
			if err := enableV2(filepath.Dir(dir), c); err != nil {
				return cgroupJoin{}, err
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return cgroupJoin{}, fmt.Errorf("qemu: cgroup of %s: %w", name, err)
		}
		var files [][2]string
		switch {
		case c == "memory" && v1:
			files = [][2]string{{"memory.limit_in_bytes", strconv.FormatInt(mem, 10)}}
		case c == "memory":
			files = [][2]string{{"memory.max", strconv.FormatInt(mem, 10)}, {"memory.swap.max", "0"}}
		case c == "cpu" && v1:
			files = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cpuPeriodMicros)}, {"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)}}
		case c == "cpu":
			files = [][2]string{{"cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriodMicros)}}
		case c == "pids":
			files = [][2]string{{"pids.max", strconv.Itoa(environment.QEMUHostPids)}}
		}
		for _, f := range files {
			err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644)
			if err != nil && !(f[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
				return cgroupJoin{}, fmt.Errorf("qemu: cgroup of %s: set %s=%s: %w", name, f[0], f[1], err)
			}
		}
		if v1 {
			join.v1Tasks = append(join.v1Tasks, filepath.Join(dir, "tasks"))
			own, err := r.ownCgroup(c)
			if err != nil {
				return cgroupJoin{}, err
			}
			join.back = append(join.back, filepath.Join(own, "tasks"))
		} else {
			join.v2Dir = dir
		}
	}
	return join, nil
}

// vmControllers are the controllers a VM's cgroup is made in: memory, cpu
// and pids (its limits) and, where cgroup v1 mounts cpuacct in a hierarchy
// of its own (not with cpu), cpuacct, which has no limit but counts the
// VM's CPU time (its metrics, Usage).
func (r *Runtime) vmControllers(cg cgroups.Path) []string {
	out := []string{"memory", "cpu", "pids"}
	if r.cg.IsV1("cpuacct") {
		acct, err := r.cg.ControllerDir("cpuacct", cg)
		if cpu, cerr := r.cg.ControllerDir("cpu", cg); err == nil && cerr == nil && acct != cpu {
			out = append(out, "cpuacct")
		}
	}
	return out
}

// enableV2 enables controller for the children of the v2 cgroup dir (and
// of its ancestors up to the hierarchy's root).
func enableV2(dir, controller string) error {
	if _, err := os.Stat(filepath.Join(dir, "cgroup.subtree_control")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		} else {
			return err
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	for _, c := range strings.Fields(string(b)) {
		if c == controller {
			return nil
		}
	}
	if parent := filepath.Dir(dir); parent != dir {
		if _, err := os.Stat(filepath.Join(parent, "cgroup.subtree_control")); err == nil {
			if err := enableV2(parent, controller); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+controller), 0o644); err != nil {
		return fmt.Errorf("qemu: enable %s in %s: %w", controller, dir, err)
	}
	return nil
}

// ownCgroup is the directory of this process's cgroup in the v1 hierarchy
// of controller.
func (r *Runtime) ownCgroup(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				p, err := cgroups.ParsePath(parts[2])
				if err != nil {
					return "", err
				}
				return r.cg.ControllerDir(controller, p)
			}
		}
	}
	return "", fmt.Errorf("qemu: this process is in no %s cgroup", controller)
}

// removeCgroup removes the cgroup of the VM named name. Whatever is still
// inside is that VM's QEMU (the cgroup is its alone, and QEMU cannot
// spawn): one whose directory is gone, or one still tearing down its
// memory after a SIGKILL (its command line then reads empty, so vmPid no
// longer finds it). It is killed and waited for.
func (r *Runtime) removeCgroup(ctx context.Context, name string) error {
	cg, err := cgroupOf(name)
	if err != nil {
		return err
	}
	procs, err := r.cg.Procs(cg)
	if err != nil {
		return err
	}
	for _, pid := range procs {
		if pid == os.Getpid() {
			// A thread of this process is there: one made by the forking
			// thread while it sat in the cgroup (seen under the race
			// detector, whose runtime starts threads of its own). It goes
			// back to this process's own cgroups; QEMU is never this
			// process, so nothing is killed for it.
			if err := r.moveOwnThreadsOut(cg); err != nil {
				return fmt.Errorf("qemu: a thread of this process is in the cgroup %s: %w", cg, err)
			}
			continue
		}
		if err := killVM(ctx, pid, name); err != nil {
			return err
		}
	}
	return r.cg.Remove(ctx, cg)
}

// moveOwnThreadsOut moves every thread of this process found in the v1
// hierarchies of cgroup cg back to the process's own cgroup of that
// controller (a v2 cgroup holds whole processes: this process is never in
// a VM's).
func (r *Runtime) moveOwnThreadsOut(cg cgroups.Path) error {
	for _, c := range r.vmControllers(cg) {
		if !r.cg.IsV1(c) {
			continue
		}
		dir, err := r.cg.ControllerDir(c, cg)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(filepath.Join(dir, "tasks"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		own, err := r.ownCgroup(c)
		if err != nil {
			return err
		}
		for _, tid := range strings.Fields(string(data)) {
			if _, err := os.Stat(filepath.Join("/proc/self/task", tid)); err != nil {
				continue // another process's (its QEMU), or gone
			}
			if err := os.WriteFile(filepath.Join(own, "tasks"), []byte(tid), 0o644); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("move thread %s to %s: %w", tid, own, err)
			}
		}
	}
	return nil
}

// forkConfined runs start (exec.Cmd.Start) on a locked OS thread that first
// joins the network namespace at netnsPath (when not "") and the v1 cgroups
// of join, so the child is forked there. The thread then goes back to its
// own cgroups and is handed back to the Go scheduler, unless it joined a
// network namespace or could not go back: then it exits with its goroutine.
func forkConfined(netnsPath string, join cgroupJoin, start func() error) error {
	var target netns.NsHandle = -1
	if netnsPath != "" {
		var err error
		if target, err = netns.GetFromPath(netnsPath); err != nil {
			return fmt.Errorf("open network namespace %s: %w", netnsPath, err)
		}
		defer target.Close()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if target != -1 {
			if err := netns.Set(target); err != nil {
				done <- fmt.Errorf("join network namespace %s: %w", netnsPath, err)
				return
			}
		}
		tid := strconv.Itoa(unix.Gettid())
		for _, f := range join.v1Tasks {
			if err := os.WriteFile(f, []byte(tid), 0o644); err != nil {
				done <- fmt.Errorf("join cgroup %s: %w", filepath.Dir(f), err)
				return
			}
		}
		err := start()
		back := target == -1
		for _, f := range join.back {
			if werr := os.WriteFile(f, []byte(tid), 0o644); werr != nil {
				back = false
			}
		}
		if back {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// baseMemory returns a sealed memfd holding the RAM file at path (a base
// snapshot's), made once per runtime: clones map it private. Its holes stay
// holes.
func (r *Runtime) baseMemory(path string) (*os.File, error) {
	r.memMu.Lock()
	defer r.memMu.Unlock()
	if f, ok := r.baseMems[path]; ok {
		return f, nil
	}
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	fd, err := unix.MemfdCreate(memfdName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	dst := os.NewFile(uintptr(fd), memfdName)
	if err := copySparse(dst, src); err != nil {
		dst.Close()
		return nil, fmt.Errorf("copy %s into a memfd: %w", path, err)
	}
	if _, err := unix.FcntlInt(dst.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		dst.Close()
		return nil, fmt.Errorf("seal the memfd of %s: %w", path, err)
	}
	r.baseMems[path] = dst
	return dst, nil
}

// forgetBaseMemory closes the memfd of the RAM file at path (a removed
// live snapshot's), if one was made: VMs that map it keep their own
// descriptor.
func (r *Runtime) forgetBaseMemory(path string) {
	r.memMu.Lock()
	defer r.memMu.Unlock()
	if f, ok := r.baseMems[path]; ok {
		f.Close()
		delete(r.baseMems, path)
	}
}

// copySparse copies src's data (not its holes) into the empty dst, which
// gets src's size.
func copySparse(dst, src *os.File) error {
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if err := dst.Truncate(size); err != nil {
		return err
	}
	var off int64
	for off < size {
		data, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole is left
		} else if err != nil {
			return err
		}
		hole, err := unix.Seek(int(src.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.NewOffsetWriter(dst, data), io.NewSectionReader(src, data, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// logPipe makes the pipe QEMU writes its stdout and stderr to: a FIFO in
// dir, which holds at most logPipeSz bytes (QEMU's descriptor is
// non-blocking: beyond that its messages are dropped, it never stalls), and
// which drainLog moves into qemu.log. It returns QEMU's end and the
// runtime's (read) end, which the runtime keeps for as long as QEMU runs
// so no message is lost when QEMU exits.
func logPipe(dir string) (w, rd *os.File, err error) {
	p := filepath.Join(dir, logFIFO)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	if err := unix.Mkfifo(p, 0o600); err != nil {
		return nil, nil, fmt.Errorf("mkfifo %s: %w", p, err)
	}
	if rd, err = os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
		return nil, nil, err
	}
	if w, err = os.OpenFile(p, os.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
		rd.Close()
		return nil, nil, err
	}
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, logPipeSz); err != nil {
		w.Close()
		rd.Close()
		return nil, nil, fmt.Errorf("size the log pipe: %w", err)
	}
	return w, rd, nil
}

// logReaders holds the read ends of the log pipes of the VMs this runtime
// started or drained, by directory.
type logReaders struct {
	mu sync.Mutex
	m  map[string]*os.File
}

func (l *logReaders) set(dir string, f *os.File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.m[dir]; old != nil && old != f {
		old.Close()
	}
	l.m[dir] = f
}

// drainLog moves what QEMU wrote to its pipe since the last drain into
// dir/qemu.log, which keeps the last logKeep bytes. A restarted runtime
// opens the pipe again by its name.
func (r *Runtime) drainLog(dir string) {
	r.logs.mu.Lock()
	defer r.logs.mu.Unlock()
	f := r.logs.m[dir]
	if f == nil {
		var err error
		if f, err = os.OpenFile(filepath.Join(dir, logFIFO), os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0); err != nil {
			return
		}
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			f.Close()
			return
		}
		r.logs.m[dir] = f
	}
	buf := make([]byte, logDrain)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(int(f.Fd()), buf[n:])
		if k <= 0 || err != nil {
			break
		}
		n += k
	}
	if n == 0 {
		return
	}
	old, _ := os.ReadFile(filepath.Join(dir, qemuLog))
	all := append(old, buf[:n]...)
	if len(all) > logKeep {
		all = all[len(all)-logKeep:]
	}
	_ = atomicfile.Write(filepath.Join(dir, qemuLog), all, 0o600)
}

// closeLog drains the log of dir a last time and forgets its pipe.
func (r *Runtime) closeLog(dir string) {
	r.drainLog(dir)
	r.logs.mu.Lock()
	defer r.logs.mu.Unlock()
	if f := r.logs.m[dir]; f != nil {
		f.Close()
		delete(r.logs.m, dir)
	}
}
