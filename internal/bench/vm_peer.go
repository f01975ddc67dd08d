package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// processesMentioning lists the pids whose command line contains s.
func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		if procfs.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ---- the bare QEMU peer ----

// peerArgsFor is QEMU's command line for the peer: the runtime's devices
// (microvm, RAM in a file, console, virtio-serial with the agent's four
// ports, a virtio-blk root disk), without Airlock's seccomp sandbox, pid
// file or -S. Paths are relative to the VM's directory.
func (b *vmBench) peerArgsFor(name string, disk vmdisk.Format, memory string, shared bool, incoming bool) []string {
	mib := b.opts.MemoryMiB
	a := []string{
		"-name", "guest=" + name,
		"-machine", "microvm,memory-backend=ram",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-accel", string(b.cold.Accel()),
	}
	if b.cold.Accel() == qemu.AccelKVM {
		a = append(a, "-cpu", "host")
	}
	a = append(a,
		"-smp", "1", "-m", fmt.Sprintf("%dM", mib),
		"-object", fmt.Sprintf("memory-backend-file,id=ram,size=%dM,mem-path=%s,share=%s", mib, memory, map[bool]string{true: "on", false: "off"}[shared]),
		"-kernel", b.boot.Kernel, "-initrd", b.boot.Initrd, "-append", b.boot.CommandLine,
		"-chardev", "file,id=console,path=console.log", "-serial", "chardev:console",
		"-device", "virtio-serial-device",
	)
	for i := range 4 {
		sock, port := "agent.sock", "airlock.agent"
		if i > 0 {
			sock, port = fmt.Sprintf("agent.%d.sock", i), fmt.Sprintf("airlock.agent.%d", i)
		}
		a = append(a, "-chardev", fmt.Sprintf("socket,id=agent%d,path=%s,server=on,wait=off", i, sock),
			"-device", fmt.Sprintf("virtserialport,chardev=agent%d,name=%s", i, port))
	}
	a = append(a,
		"-drive", "id=root,file=disk,format="+string(disk)+",if=none,cache=writeback,discard=unmap",
		"-device", "virtio-blk-device,drive=root",
		"-qmp", "unix:qmp.sock,server=on,wait=off",
	)
	if incoming {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// peerDir makes a directory for one peer VM with a copy-on-write disk
// over base (untimed).
func (b *vmBench) peerDir(ctx context.Context, base string, baseFormat vmdisk.Format) (dir, name string, format vmdisk.Format, err error) {
	b.mu.Lock()
	b.seq++
	n := b.seq
	b.mu.Unlock()
	name = fmt.Sprintf("airlock-bench-peer-%d", n)
	dir = filepath.Join(b.root, "peer", strconv.Itoa(n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", err
	}
	if format, err = vmdisk.Clone(ctx, base, baseFormat, filepath.Join(dir, "disk")); err != nil {
		return "", "", "", err
	}
	return dir, name, format, nil
}

func (b *vmBench) startPeer(dir string, args []string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(dir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("qemu-system-x86_64", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.peers[cmd] = struct{}{}
	b.mu.Unlock()
	return cmd, nil
}

func (b *vmBench) endPeer(cmd *exec.Cmd, dir string) {
	stopPeer(cmd)
	b.mu.Lock()
	delete(b.peers, cmd)
	b.mu.Unlock()
	_ = os.RemoveAll(dir)
}

func stopPeer(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// waitAgentInfo waits until the agent on dir/agent.sock answers Info.
func waitAgentInfo(ctx context.Context, dir string, cmd *exec.Cmd) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sock := filepath.Join(dir, "agent.sock")
	for {
		c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}, nil)
		_, err := c.Info(ctx)
		c.Close()
		if err == nil {
			return nil
		}
		if cmd.ProcessState != nil || !procfs.Alive(cmd.Process.Pid) {
			return fmt.Errorf("qemu exited: %s", fileTail(filepath.Join(dir, "qemu.log")))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no agent answer: %w (last: %w; console: %s)", ctx.Err(), err, fileTail(filepath.Join(dir, "console.log")))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func fileTail(p string) string {
	bs, err := os.ReadFile(p)
	if err != nil {
		return "(none)"
	}
	if len(bs) > 600 {
		bs = bs[len(bs)-600:]
	}
	return strings.TrimSpace(string(bs))
}

// peerBoot times bare QEMU from its start to the agent's answer.
func (b *vmBench) peerBoot(ctx context.Context) (time.Duration, error) {
	dir, name, format, err := b.peerDir(ctx, b.image, vmdisk.Raw)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	cmd, err := b.startPeer(dir, b.peerArgsFor(name, format, "memory", true, false))
	if err != nil {
		return 0, err
	}
	defer b.endPeer(cmd, dir)
	if err := waitAgentInfo(ctx, dir, cmd); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// peerSave boots bare QEMU, waits for its agent, saves it the way a base
// snapshot is saved (stop, x-ignore-shared migration of the device state;
// the RAM is its shared file) and returns the directory holding its disk,
// memory and state.
func (b *vmBench) peerSave(ctx context.Context) (peerSaved, error) {
	dir, name, format, err := b.peerDir(ctx, b.image, vmdisk.Raw)
	if err != nil {
		return peerSaved{}, err
	}
	cmd, err := b.startPeer(dir, b.peerArgsFor(name, format, "memory", true, false))
	if err != nil {
		return peerSaved{}, err
	}
	defer func() {
		stopPeer(cmd)
		b.mu.Lock()
		delete(b.peers, cmd)
		b.mu.Unlock()
	}()
	if err := waitAgentInfo(ctx, dir, cmd); err != nil {
		return peerSaved{}, err
	}
	time.Sleep(200 * time.Millisecond) // let the guest see the host connection go
	f, err := os.Create(filepath.Join(dir, "state"))
	if err != nil {
		return peerSaved{}, err
	}
	defer f.Close()
	err = withPeerQMP(ctx, dir, func(c *qmp.Client) error {
		if err := c.Stop(ctx); err != nil {
			return err
		}
		if err := c.MigrateSetCapabilities(ctx, qmp.MigrationCapability{Capability: "x-ignore-shared", State: true}); err != nil {
			return err
		}
		if err := c.SendFD(ctx, "bench", f); err != nil {
			return err
		}
		if err := c.Migrate(ctx, "fd:bench"); err != nil {
			return err
		}
		_, err := c.WaitMigration(ctx, 5*time.Millisecond)
		return err
	})
	if err != nil {
		return peerSaved{}, fmt.Errorf("save: %w", err)
	}
	return peerSaved{dir: dir, format: format}, f.Sync()
}

// peerSaved is the bare QEMU's saved VM: disk, memory and state in dir.
type peerSaved struct {
	dir    string
	format vmdisk.Format
}

// peerRestore times bare QEMU from its start with -incoming to the
// agent's answer: a new copy-on-write disk over the saved one (untimed),
// the saved RAM file mapped private, the saved device state loaded, cont.
func (b *vmBench) peerRestore(ctx context.Context, saved peerSaved) (time.Duration, error) {
	dir, name, format, err := b.peerDir(ctx, filepath.Join(saved.dir, "disk"), saved.format)
	if err != nil {
		return 0, err
	}
	state, err := os.Open(filepath.Join(saved.dir, "state"))
	if err != nil {
		return 0, err
	}
	defer state.Close()
	t0 := time.Now()
	cmd, err := b.startPeer(dir, b.peerArgsFor(name, format, filepath.Join(saved.dir, "memory"), false, true))
	if err != nil {
		return 0, err
	}
	defer b.endPeer(cmd, dir)
	err = withPeerQMP(ctx, dir, func(c *qmp.Client) error {
		if err := c.MigrateSetCapabilities(ctx, qmp.MigrationCapability{Capability: "x-ignore-shared", State: true}); err != nil {
			return err
		}
		if err := c.SendFD(ctx, "bench", state); err != nil {
			return err
		}
		if err := c.MigrateIncoming(ctx, "fd:bench"); err != nil {
			return err
		}
		st, err := c.WaitStatus(ctx, time.Millisecond, func(s qmp.Status) bool { return s.Status != qmp.StatusInMigrate })
		if err != nil {
			return err
		}
		if st.Status != qmp.StatusPaused {
			return fmt.Errorf("the VM is %s after loading its state", st.Status)
		}
		return c.Cont(ctx)
	})
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, fileTail(filepath.Join(dir, "qemu.log")))
	}
	if err := waitAgentInfo(ctx, dir, cmd); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// withPeerQMP connects to a peer's QMP socket once it exists.
func withPeerQMP(ctx context.Context, dir string, fn func(c *qmp.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sock := filepath.Join(dir, "qmp.sock")
	var c *qmp.Client
	for {
		var err error
		if c, err = qmp.Dial(ctx, sock, qmp.Options{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("qmp: %w (last: %w)", ctx.Err(), err)
		case <-time.After(time.Millisecond):
		}
	}
	defer c.Close()
	return fn(c)
}

// ---- idle memory ----
