package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/unixsock"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// machine is how QEMU runs one VM: what machine.json holds. A VM restored
// from a snapshot (its own, or a base snapshot) must be started with the
// same devices, in the same order, with the same memory size and vCPUs as
// the VM that wrote it; args derives the whole command line from here.
type machine struct {
	Accel     Accel  `json:"accel"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int64  `json:"memory_mib"`
	Kernel    string `json:"kernel"`
	Initrd    string `json:"initrd"`
	Cmdline   string `json:"cmdline"`
	// Disk is the root disk (absolute), of DiskFormat.
	Disk       string        `json:"disk"`
	DiskFormat vmdisk.Format `json:"disk_format"`
	// Chain is the root disk's backing chain, top down, as the host made
	// it (never read from a qcow2 header, which QEMU writes): QEMU gets
	// each file as a descriptor.
	Chain []diskLayer `json:"chain,omitempty"`
	// Memory is the file guest RAM lives in; MemoryShared maps it shared
	// (the VM's own RAM file: writes land in it, so a suspend need not
	// copy RAM) or private (a base snapshot's RAM, copy-on-write: clones
	// share every page they do not write).
	Memory       string `json:"memory"`
	MemoryShared bool   `json:"memory_shared"`
	// NIC: the VM has a virtio-net device. Netns and TAP say what it is
	// joined to; without a TAP (a base snapshot's VM) it is joined to
	// nothing.
	NIC   bool   `json:"nic,omitempty"`
	Netns string `json:"netns,omitempty"`
	TAP   string `json:"tap,omitempty"`
	MAC   string `json:"mac,omitempty"`
	// Base is the base snapshot the VM was cloned from ("" for a cold
	// boot).
	Base string `json:"base,omitempty"`
	// Guest is applied to the guest agent at Start (and again at wake).
	Guest guestSettings `json:"guest"`
}

// diskLayer is one backing file of a root disk.
type diskLayer struct {
	Path   string        `json:"path"`
	Format vmdisk.Format `json:"format"`
}

// chainOver is the backing chain of a disk cloned (vmdisk.Clone, which
// returned format) over base, whose own chain is baseChain: a raw clone
// (a reflink copy) has none.
func chainOver(format vmdisk.Format, base diskLayer, baseChain []diskLayer) []diskLayer {
	if format == vmdisk.Raw {
		return nil
	}
	c := []diskLayer{base}
	if base.Format == vmdisk.QCOW2 {
		c = append(c, baseChain...)
	}
	return c
}

// guestSettings are what makes a sandbox itself inside its VM, applied
// through the agent after every boot or restore.
type guestSettings struct {
	Hostname string   `json:"hostname"`
	Env      []string `json:"env,omitempty"`
	Address  string   `json:"address,omitempty"` // eth0's prefix
	Gateway  string   `json:"gateway,omitempty"`
	DNS      string   `json:"dns,omitempty"`
	CACert   []byte   `json:"ca_cert,omitempty"`
	// PidsMax limits the processes of the guest's workload (the agent's
	// pids cgroup in the guest); 0: unlimited.
	PidsMax int64 `json:"pids_max,omitempty"`
}

// args is QEMU's command line for m with its sockets, console and pid file
// in dir (relative names: QEMU runs in dir, which keeps socket paths short).
// incoming: wait for a migration stream (a restore) instead of booting.
// The runtime itself starts QEMU with descriptors instead of these paths
// (launch, handles); the devices and their order are the same.
func (m machine) args(name string, incoming bool) []string {
	return m.commandLine(name, incoming, false, m.pathHandles())
}

// handles are how QEMU reaches what a machine names: paths (BareVM, args),
// or the descriptors launch hands it.
type handles struct {
	kernel, initrd, memory string
	// addFD are -add-fd values; drive is the -drive value of the root disk.
	addFD []string
	drive string
	// qmp and agents are the chardev backends of the QMP socket and of the
	// agent ports ("socket,…" without id).
	qmp    string
	agents []string
	// tap is the -netdev tap options after "tap,id=net0," ("" when the
	// NIC is joined to nothing).
	tap string
}

// pathHandles names everything by path, relative to QEMU's directory for
// the sockets (QEMU creates them).
func (m machine) pathHandles() handles {
	h := handles{
		kernel: m.Kernel, initrd: m.Initrd, memory: m.Memory,
		drive: fmt.Sprintf("id=root,file=%s,format=%s,if=none,cache=writeback,discard=unmap", qemuOptValue(m.Disk), m.DiskFormat),
		qmp:   "socket,path=" + qmpSocket + ",server=on,wait=off",
	}
	for i := range agentPorts {
		h.agents = append(h.agents, fmt.Sprintf("socket,path=%s,server=on,wait=off", agentSocketName(i)))
	}
	if m.TAP != "" {
		h.tap = "ifname=" + m.TAP + ",script=no,downscript=no"
	}
	return h
}

// commandLine is args; bare leaves out what the runtime adds around the
// devices (-no-shutdown, the console ring, the pid file, the seccomp
// sandbox, -S; see BareVM) and writes the console to bareConsoleLog.
func (m machine) commandLine(name string, incoming, bare bool, h handles) []string {
	a := []string{
		"-name", "guest=" + name,
		"-machine", "microvm,memory-backend=ram",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
	}
	if !bare {
		// -no-shutdown: a guest that powers off or panics leaves QEMU
		// running, stopped, so its console can still be read; State
		// reports it stopped and Stop or Delete end it.
		a = append(a, "-no-shutdown")
	}
	if m.Accel == AccelTCG {
		// A bounded translation cache (QEMU 7.2's default is 1 GiB), so
		// QEMU fits in its cgroup (HostMemoryBytes).
		a = append(a, "-accel", fmt.Sprintf("tcg,tb-size=%d", tcgCacheMiB))
	} else {
		a = append(a, "-accel", string(m.Accel))
	}
	if m.Accel == AccelKVM {
		a = append(a, "-cpu", "host")
	}
	for _, fd := range h.addFD {
		a = append(a, "-add-fd", fd)
	}
	a = append(a,
		"-smp", strconv.Itoa(m.CPUs),
		"-m", fmt.Sprintf("%dM", m.MemoryMiB),
		"-object", fmt.Sprintf("memory-backend-file,id=ram,size=%dM,mem-path=%s,share=%s", m.MemoryMiB, qemuOptValue(h.memory), onOff(m.MemoryShared)),
		"-kernel", h.kernel, "-initrd", h.initrd, "-append", m.Cmdline,
	)
	if bare {
		a = append(a, "-chardev", fmt.Sprintf("file,id=%s,path=%s", consoleDevice, bareConsoleLog))
	} else {
		// The serial console in a ring in QEMU's memory: a guest writing
		// to it without end fills nothing on the host (consoleTail reads
		// it over QMP).
		a = append(a, "-chardev", fmt.Sprintf("ringbuf,id=%s,size=%d", consoleDevice, consoleRingBytes))
	}
	a = append(a, "-serial", "chardev:"+consoleDevice, "-device", "virtio-serial-device")
	for i := range agentPorts {
		a = append(a,
			"-chardev", fmt.Sprintf("%s,id=agent%d", h.agents[i], i),
			"-device", fmt.Sprintf("virtserialport,chardev=agent%d,name=%s", i, agentPortName(i)))
	}
	a = append(a,
		"-drive", h.drive,
		"-device", "virtio-blk-device,drive=root",
	)
	if m.NIC {
		if h.tap != "" {
			a = append(a, "-netdev", "tap,id=net0,"+h.tap)
		} else {
			a = append(a, "-netdev", "hubport,id=net0,hubid=0")
		}
		dev := "virtio-net-device,netdev=net0"
		if m.MAC != "" {
			dev += ",mac=" + m.MAC
		}
		a = append(a, "-device", dev)
	}
	a = append(a, "-chardev", h.qmp+",id=qmp", "-mon", "chardev=qmp,mode=control")
	if !bare {
		a = append(a,
			// QEMU's own seccomp filter: no obsolete system calls, no
			// setuid/setgid, no fork/exec, no scheduler or affinity changes.
			"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		)
	}
	switch {
	case incoming:
		a = append(a, "-incoming", "defer")
	case !bare:
		a = append(a, "-S") // Start lets it run
	}
	return a
}

// qemuOptValue escapes a value for QEMU's key=value option syntax (a comma
// is written twice).
func qemuOptValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func writeMachine(dir string, m machine) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, machineFile), b, 0o600)
}

func readMachine(dir string) (machine, error) {
	var m machine
	b, err := os.ReadFile(filepath.Join(dir, machineFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, machineFile), err)
	}
	return m, nil
}

// launchTimeout bounds QEMU's start (until its QMP socket exists).
const launchTimeout = 30 * time.Second

// qemuLog is QEMU's own stdout and stderr (the guest's console is a ring
// in QEMU, read over QMP).
const qemuLog = "qemu.log"

// launch starts QEMU for m in dir (in m.Netns when set, else in a network
// namespace of its own with nothing in it) and returns its pid once it
// answers on its QMP socket. QEMU runs as the VM's own host uid and gid
// (vmUID) with no capabilities, in the VM's cgroup (makeCgroup), and
// reaches only what it is handed (see confine.go). It runs in a session of
// its own with its output in a pipe, so nothing ties it to the server: it
// outlives a server that exits or crashes, and a later server finds it by
// its pid file (written here). It is not daemonized (-daemonize forks and
// calls setsid after QEMU's seccomp filter is in place, which forbids
// both): a goroutine of the runtime waits for it instead, so it is reaped
// when it exits while this server runs (the goroutine ends with the
// process).
func (r *Runtime) launch(ctx context.Context, dir, name string, m machine, incoming bool) (int, error) {
	stale := []string{qmpSocket, pidFile}
	for i := range agentPorts {
		stale = append(stale, agentSocketName(i))
	}
	for _, f := range stale {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	t0 := time.Now()
	uid, err := r.vmUID(ctx, dir)
	if err != nil {
		return 0, err
	}
	tUID := time.Since(t0)
	join, err := r.makeCgroup(name, m)
	if err != nil {
		return 0, err
	}
	tCgroup := time.Since(t0)
	var files launchFiles
	defer files.close()
	h, err := r.handles(ctx, dir, m, uid, &files)
	if err != nil {
		return 0, fmt.Errorf("start qemu: %w", err)
	}
	logw, logr, err := logPipe(dir)
	if err != nil {
		return 0, err
	}
	files.own = append(files.own, logw)
	r.closeLog(dir)
	r.logs.set(dir, logr)
	cmd := exec.Command(r.binary, m.commandLine(name, incoming, false, h)...)
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = logw, logw
	cmd.ExtraFiles = files.extra
	// Its own session: a signal to the server's process group (a ^C)
	// does not reach the VM. Its own uid and gid, no supplementary group
	// but /dev/kvm's (under KVM).
	cred := &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	if m.Accel == AccelKVM {
		var st unix.Stat_t
		if err := unix.Stat("/dev/kvm", &st); err == nil {
			cred.Groups = []uint32{st.Gid}
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	if m.Netns == "" {
		cmd.SysProcAttr.Cloneflags = unix.CLONE_NEWNET
	}
	if join.v2Dir != "" {
		cg, err := os.Open(join.v2Dir)
		if err != nil {
			return 0, fmt.Errorf("start qemu: %w", err)
		}
		files.own = append(files.own, cg)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	tHandles := time.Since(t0)
	if err := forkConfined(m.Netns, join, cmd.Start); err != nil {
		return 0, fmt.Errorf("start qemu: %w", err)
	}
	files.close()
	tFork := time.Since(t0)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := atomicfile.Write(filepath.Join(dir, pidFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("start qemu: %w", err)
	}
	if err := r.waitQMP(ctx, dir, exited); err != nil {
		_ = cmd.Process.Kill() // nothing to do when it exited
		return 0, fmt.Errorf("start qemu: %w", err)
	}
	r.log.DebugContext(ctx, "qemu launched, confined", "vm", name, "uid", uid, "uid_reserve", tUID, "cgroup", tCgroup-tUID,
		"handles", tHandles-tCgroup, "fork", tFork-tHandles, "qmp_greeting", time.Since(t0)-tFork)
	return cmd.Process.Pid, nil
}

// launchFiles are the descriptors a QEMU is started with: extra become its
// fds 3, 4, …; own are closed once it started (extra are among them).
type launchFiles struct {
	extra []*os.File
	own   []*os.File
}

// pass adds f to QEMU's descriptors and returns its number there; keep: f
// is not the runtime's to close.
func (l *launchFiles) pass(f *os.File, keep bool) int {
	l.extra = append(l.extra, f)
	if !keep {
		l.own = append(l.own, f)
	}
	return 2 + len(l.extra)
}

func (l *launchFiles) close() {
	for _, f := range l.own {
		f.Close()
	}
	l.own = nil
}

// handles opens what QEMU needs of m and adds it to files: the kernel and
// initramfs (0644, reopened through /proc/self/fd), the RAM file (the VM's
// own, chowned to uid, or a base snapshot's as a sealed memfd), the root
// disk and its backing chain (fd sets), the QMP and agent sockets (bound
// and listening here) and the TAP device (opened in m.Netns).
func (r *Runtime) handles(ctx context.Context, dir string, m machine, uid uint32, files *launchFiles) (handles, error) {
	var h handles
	open := func(p string, flag int) (*os.File, error) {
		return os.OpenFile(p, flag|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	proc := func(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }
	for _, b := range []struct {
		path string
		dst  *string
	}{{m.Kernel, &h.kernel}, {m.Initrd, &h.initrd}} {
		f, err := open(b.path, os.O_RDONLY)
		if err != nil {
			return h, err
		}
		fd := files.pass(f, false)
		if fi, err := f.Stat(); err != nil || fi.Mode().Perm()&0o004 == 0 {
			return h, fmt.Errorf("boot input %s must be readable by everyone (mode 0644): QEMU runs as its VM's uid", b.path)
		}
		*b.dst = proc(fd)
	}
	if within(dir, m.Memory) {
		// The VM's own RAM: made here, its uid's (QEMU reopens it).
		f, err := os.OpenFile(m.Memory, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return h, err
		}
		fd := files.pass(f, false)
		fi, err := f.Stat()
		if err != nil {
			return h, err
		}
		if fi.Size() == 0 {
			if err := f.Truncate(m.MemoryMiB << 20); err != nil {
				return h, err
			}
		}
		if err := f.Chown(int(uid), int(uid)); err != nil {
			return h, err
		}
		h.memory = proc(fd)
	} else {
		if m.MemoryShared {
			return h, fmt.Errorf("the shared RAM file %s is not the VM's own", m.Memory)
		}
		f, err := r.baseMemory(m.Memory)
		if err != nil {
			return h, err
		}
		h.memory = proc(files.pass(f, true))
	}
	// The root disk: fd set 1 (read-write and read-only: QEMU asks for
	// either), its backing files sets 2, 3, … read-only.
	set := 0
	addSet := func(p string, rw bool) error {
		set++
		flags := []int{os.O_RDONLY}
		if rw {
			flags = append(flags, os.O_RDWR)
		}
		for _, fl := range flags {
			f, err := open(p, fl)
			if err != nil {
				return err
			}
			h.addFD = append(h.addFD, fmt.Sprintf("fd=%d,set=%d", files.pass(f, false), set))
		}
		return nil
	}
	if err := addSet(m.Disk, true); err != nil {
		return h, err
	}
	if m.DiskFormat == vmdisk.QCOW2 && len(m.Chain) == 0 {
		return h, fmt.Errorf("the qcow2 root disk %s has no recorded backing chain", m.Disk)
	}
	// No image locking on the top file: nothing but this QEMU holds it,
	// and its two descriptors are two open file descriptions, whose
	// locks conflict when QEMU takes the disk back after a migration
	// that let it go (a live snapshot's cont: "Failed to get write
	// lock").
	h.drive = fmt.Sprintf("id=root,file=/dev/fdset/%d,file.locking=off,format=%s,if=none,cache=writeback,discard=unmap", set, m.DiskFormat)
	prefix := ""
	for _, l := range m.Chain {
		if err := addSet(l.Path, false); err != nil {
			return h, err
		}
		prefix += "backing."
		h.drive += fmt.Sprintf(",%sdriver=%s,%sfile.filename=/dev/fdset/%d", prefix, l.Format, prefix, set)
	}
	listen := func(name string) (string, error) {
		f, err := listenIn(dir, name)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("socket,fd=%d,server=on,wait=off", files.pass(f, false)), nil
	}
	var err error
	if h.qmp, err = listen(qmpSocket); err != nil {
		return h, err
	}
	for i := range agentPorts {
		s, err := listen(agentSocketName(i))
		if err != nil {
			return h, err
		}
		h.agents = append(h.agents, s)
	}
	if m.NIC && m.TAP != "" {
		var tap *os.File
		if err := inNetns(m.Netns, func() (err error) { tap, err = openTAP(m.TAP); return err }); err != nil {
			return h, fmt.Errorf("tap: %w", err)
		}
		h.tap = fmt.Sprintf("fd=%d", files.pass(tap, false))
	}
	return h, ctx.Err()
}

// within reports whether p is in dir.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..") && !strings.Contains(rel, "/")
}

// listenIn binds and listens on the Unix socket name in dir (through the
// directory's descriptor: no 108-byte limit) and returns it as a file.
func listenIn(dir, name string) (*os.File, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", dfd, name)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s/%s: %w", dir, name, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, name)), nil
}

// waitQMP waits until the QEMU running in dir greets on its QMP socket,
// for at most launchTimeout; a value on exited means QEMU exited first.
func (r *Runtime) waitQMP(ctx context.Context, dir string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	greeted := make(chan error, 1)
	go func() {
		greeted <- withQMP(ctx, dir, func(c *qmp.Client) error { return nil })
	}()
	select {
	case err := <-greeted:
		if err != nil {
			r.drainLog(dir)
			return fmt.Errorf("no QMP greeting: %w: %s", err, logTail(filepath.Join(dir, qemuLog)))
		}
		return nil
	case err := <-exited:
		cancel()
		<-greeted
		r.drainLog(dir)
		return fmt.Errorf("exited (%v): %s", err, logTail(filepath.Join(dir, qemuLog)))
	}
}

// waitQMPSocket waits until the QEMU running in dir has made its QMP
// socket, for at most launchTimeout; a value on exited (nil: not watched)
// means QEMU exited first.
func waitQMPSocket(ctx context.Context, dir string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	w := retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond}.Start(nil)
	for !exists(filepath.Join(dir, qmpSocket)) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited (%v): %s", err, logTail(filepath.Join(dir, qemuLog)))
		default:
		}
		if err := w.Wait(ctx); err != nil {
			return fmt.Errorf("no QMP socket: %w: %s", err, logTail(filepath.Join(dir, qemuLog)))
		}
	}
	return nil
}

// logTail is the end of a log file, for errors.
func logTail(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "(no log)"
	}
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return string(bytes.TrimSpace(b))
}

// readPid reads QEMU's pid file.
func readPid(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", filepath.Join(dir, pidFile), b)
	}
	return pid, nil
}

// vmPid returns the pid of the QEMU of the VM name whose state is in dir,
// or 0 when none runs: the pid file's process must be alive (not a
// zombie) and have been started with -name guest=<name> (a stale pid
// file's pid may have been reused by anything).
func vmPid(dir, name string) int {
	pid, err := readPid(dir)
	if err != nil {
		return 0
	}
	if !isVM(pid, name) {
		return 0
	}
	return pid
}

func isVM(pid int, name string) bool {
	if !procfs.Alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(cmdline, []byte("\x00guest="+name+"\x00"))
}

// killVM ends QEMU pid (SIGKILL) and waits until it is gone.
func killVM(ctx context.Context, pid int, name string) error {
	if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill qemu %d: %w", pid, err)
	}
	return waitGone(ctx, pid, name, 10*time.Second)
}

// waitGone waits until QEMU pid has exited.
func waitGone(ctx context.Context, pid int, name string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	w := retry.Policy{Initial: time.Millisecond, Max: 20 * time.Millisecond}.Start(nil)
	// Not isVM: a dying process's command line reads empty while it
	// still tears down its memory; only its state says it is gone.
	for procfs.Alive(pid) || reaping(pid) {
		if err := w.Wait(ctx); err != nil {
			return fmt.Errorf("qemu %d did not exit: %w", pid, err)
		}
	}
	return nil
}

// reaping reports whether pid is a zombie child of this process: a QEMU
// this runtime started, which its launch goroutine is about to reap. Until
// then the pid exists; callers that saw it die wait for that too.
func reaping(pid int) bool {
	st, ok := procfs.ReadStat(pid)
	return ok && st.State == 'Z' && st.PPID == os.Getpid()
}

// qmpListenWait bounds trying again a QMP socket that refuses
// connections (QEMU starting; a QEMU that died leaves its socket file).
const qmpListenWait = 3 * time.Second

// qmpTimeout bounds one QMP conversation.
const qmpTimeout = 30 * time.Second

// withQMP connects to the VM's QMP socket (QEMU serves one client at a
// time; callers hold the sandbox's lock) and runs fn.
func withQMP(ctx context.Context, dir string, fn func(c *qmp.Client) error) error {
	return withQMPTimeout(ctx, dir, qmpTimeout, fn)
}

func withQMPTimeout(ctx context.Context, dir string, limit time.Duration, fn func(c *qmp.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	// QEMU binds its QMP socket a moment before it listens on it: a
	// refused connection to a socket that exists is tried again.
	w := retry.Policy{Initial: time.Millisecond, Max: 20 * time.Millisecond}.Start(nil)
	refusedUntil := time.Now().Add(qmpListenWait)
	var conn net.Conn
	var err error
	for {
		if conn, err = unixsock.DialIn(ctx, dir, qmpSocket); err == nil {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || !exists(filepath.Join(dir, qmpSocket)) || time.Now().After(refusedUntil) {
			return fmt.Errorf("qmp: %w", err)
		}
		if werr := w.Wait(ctx); werr != nil {
			return fmt.Errorf("qmp: %w (%w)", err, werr)
		}
	}
	c, err := qmp.NewClient(ctx, conn, qmp.Options{})
	if err != nil {
		conn.Close()
		return fmt.Errorf("qmp: %w", err)
	}
	defer c.Close()
	return fn(c)
}
