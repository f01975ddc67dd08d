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

// guestSettings are what makes a sandbox itself inside its VM, applied
// through the agent after every boot or restore.
type guestSettings struct {
	Hostname string   `json:"hostname"`
	Env      []string `json:"env,omitempty"`
	Address  string   `json:"address,omitempty"` // eth0's prefix
	Gateway  string   `json:"gateway,omitempty"`
	DNS      string   `json:"dns,omitempty"`
	CACert   []byte   `json:"ca_cert,omitempty"`
}

// args is QEMU's command line for m with its sockets, console and pid file
// in dir (relative names: QEMU runs in dir, which keeps socket paths short).
// incoming: wait for a migration stream (a restore) instead of booting.
func (m machine) args(name string, incoming bool) []string {
	return m.commandLine(name, incoming, false)
}

// commandLine is args; bare leaves out what the runtime adds around the
// devices (-no-shutdown, the console ring, the pid file, the seccomp
// sandbox, -S; see BareVM) and writes the console to bareConsoleLog.
func (m machine) commandLine(name string, incoming, bare bool) []string {
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
	a = append(a, "-accel", string(m.Accel))
	if m.Accel == AccelKVM {
		a = append(a, "-cpu", "host")
	}
	a = append(a,
		"-smp", strconv.Itoa(m.CPUs),
		"-m", fmt.Sprintf("%dM", m.MemoryMiB),
		"-object", fmt.Sprintf("memory-backend-file,id=ram,size=%dM,mem-path=%s,share=%s", m.MemoryMiB, qemuOptValue(m.Memory), onOff(m.MemoryShared)),
		"-kernel", m.Kernel, "-initrd", m.Initrd, "-append", m.Cmdline,
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
			"-chardev", fmt.Sprintf("socket,id=agent%d,path=%s,server=on,wait=off", i, agentSocketName(i)),
			"-device", fmt.Sprintf("virtserialport,chardev=agent%d,name=%s", i, agentPortName(i)))
	}
	a = append(a,
		"-drive", fmt.Sprintf("id=root,file=%s,format=%s,if=none,cache=writeback,discard=unmap", qemuOptValue(m.Disk), m.DiskFormat),
		"-device", "virtio-blk-device,drive=root",
	)
	if m.NIC {
		if m.TAP != "" {
			a = append(a, "-netdev", "tap,id=net0,ifname="+m.TAP+",script=no,downscript=no")
		} else {
			a = append(a, "-netdev", "hubport,id=net0,hubid=0")
		}
		dev := "virtio-net-device,netdev=net0"
		if m.MAC != "" {
			dev += ",mac=" + m.MAC
		}
		a = append(a, "-device", dev)
	}
	a = append(a, "-qmp", "unix:"+qmpSocket+",server=on,wait=off")
	if !bare {
		a = append(a,
			"-pidfile", pidFile,
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

// launch starts QEMU for m in dir (in m.Netns when set) and returns its
// pid once its QMP socket exists. QEMU runs in a session of its own with
// its output in a file, so nothing ties it to the server: it outlives a
// server that exits or crashes, and a later server finds it by its pid
// file. It is not daemonized (-daemonize forks and calls setsid after
// QEMU's seccomp filter is in place, which forbids both): a goroutine of
// the runtime waits for it instead, so it is reaped when it exits while
// this server runs (the goroutine ends with the process).
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
	logf, err := os.OpenFile(filepath.Join(dir, qemuLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(r.binary, m.args(name, incoming)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a signal to the server's process group (a ^C)
	// does not reach the VM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if m.Netns != "" {
		err = inNetns(m.Netns, cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return 0, fmt.Errorf("start qemu: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitQMPSocket(ctx, dir, exited); err != nil {
		_ = cmd.Process.Kill() // nothing to do when it exited
		return 0, fmt.Errorf("start qemu: %w", err)
	}
	return cmd.Process.Pid, nil
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
