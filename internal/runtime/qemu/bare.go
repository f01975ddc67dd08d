package qemu

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// bareConsoleLog is the file a BareVM's serial console is written to.
const bareConsoleLog = "console.log"

// BareVM is a VM started the way the runtime starts a sandbox's, without
// the runtime: the bare-QEMU peer `airlock bench vm` times the runtime
// against. Its command line is the one a sandbox's VM gets (commandLine),
// the same devices in the same order — microvm with its RAM in a file, the
// serial console, virtio-serial with the agent's ports, a virtio-blk root
// disk, the QMP socket — without what the runtime adds around them:
// -no-shutdown, a NIC, the pid file, QEMU's seccomp sandbox and -S (it
// boots at once). Its console goes to the file console.log, QEMU's own
// output to qemu.log, both in Dir.
type BareVM struct {
	Dir        string        // QEMU runs here; the root disk is Dir/disk
	Name       string        // -name guest=Name
	Accel      Accel         // AccelKVM or AccelTCG
	MemoryMiB  int64         // guest RAM; 1 vCPU
	Memory     string        // the file guest RAM lives in (relative to Dir, or absolute)
	Shared     bool          // Memory mapped shared (writes land in the file) or private (copy-on-write)
	DiskFormat vmdisk.Format // of Dir/disk
	Boot       Boot
	// Incoming: wait for a migration stream (Load) instead of booting.
	Incoming bool
}

func (v BareVM) args() []string {
	m := machine{
		Accel: v.Accel, CPUs: 1, MemoryMiB: v.MemoryMiB,
		Kernel: v.Boot.Kernel, Initrd: v.Boot.Initrd, Cmdline: v.Boot.cmdline(v.Accel),
		Disk: diskFile, DiskFormat: v.DiskFormat,
		Memory: v.Memory, MemoryShared: v.Shared,
	}
	return m.commandLine(v.Name, v.Incoming, true, m.pathHandles())
}

// Start starts qemu-system-x86_64 (from PATH) for v and returns its
// process; the caller ends it (Process.Kill, then Wait).
func (v BareVM) Start() (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(v.Dir, qemuLog))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command("qemu-system-x86_64", v.args()...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = v.Dir, logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	return cmd, nil
}

// bareAgentWait bounds WaitAgent.
const bareAgentWait = 2 * time.Minute

// WaitAgent waits until the guest agent answers Info on its first port,
// trying every 2 ms (a fresh connection each time), for at most 2 minutes;
// QEMU exiting ends the wait. cmd is v's QEMU (from Start).
func (v BareVM) WaitAgent(ctx context.Context, cmd *exec.Cmd) error {
	ctx, cancel := context.WithTimeout(ctx, bareAgentWait)
	defer cancel()
	for {
		c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return dialPort(ctx, v.Dir, agentSocket) }, nil)
		_, err := c.Info(ctx)
		c.Close()
		if err == nil {
			return nil
		}
		if cmd.ProcessState != nil || !procfs.Alive(cmd.Process.Pid) {
			return fmt.Errorf("qemu exited: %s", logTail(filepath.Join(v.Dir, qemuLog)))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no agent answer: %w (last: %w; console: %s)", ctx.Err(), err, logTail(filepath.Join(v.Dir, bareConsoleLog)))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Save stops the VM and writes its device state to state the way a base
// snapshot is saved (x-ignore-shared: the RAM stays in its shared file).
func (v BareVM) Save(ctx context.Context, state string) error {
	if err := waitQMPSocket(ctx, v.Dir, nil); err != nil {
		return err
	}
	return saveVM(ctx, v.Dir, state, true)
}

// Load feeds a VM started with Incoming the state Save wrote and waits
// until it is loaded (paused; Cont runs it).
func (v BareVM) Load(ctx context.Context, state string) error {
	if err := waitQMPSocket(ctx, v.Dir, nil); err != nil {
		return err
	}
	if err := loadVM(ctx, v.Dir, state, true); err != nil {
		return fmt.Errorf("%w: %s", err, logTail(filepath.Join(v.Dir, qemuLog)))
	}
	return nil
}

// WithQMP connects to the QMP socket of the VM whose directory is dir — a
// sandbox's (Runtime.StateDir) or a BareVM's — and runs fn; a QEMU just
// started is given until the launch timeout to make its socket.
func WithQMP(ctx context.Context, dir string, fn func(c *qmp.Client) error) error {
	if err := waitQMPSocket(ctx, dir, nil); err != nil {
		return err
	}
	return withQMP(ctx, dir, fn)
}
