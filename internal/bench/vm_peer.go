package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// peerVM is the bare QEMU peer in dir: the runtime's devices, 1 vCPU,
// --memory-mib of RAM in memory (shared: a boot's own file; private: a
// saved one, copy-on-write), the copy-on-write disk dir/disk of format.
func (b *vmBench) peerVM(dir, name string, format vmdisk.Format, memory string, shared, incoming bool) qemu.BareVM {
	return qemu.BareVM{Dir: dir, Name: name, Accel: b.cold.Accel(), MemoryMiB: int64(b.opts.MemoryMiB),
		Memory: memory, Shared: shared, DiskFormat: format, Boot: b.boot, Incoming: incoming}
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

func (b *vmBench) startPeer(vm qemu.BareVM) (*exec.Cmd, error) {
	cmd, err := vm.Start()
	if err != nil {
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

// peerBoot times bare QEMU from its start to the agent's answer.
func (b *vmBench) peerBoot(ctx context.Context) (time.Duration, error) {
	dir, name, format, err := b.peerDir(ctx, b.image, vmdisk.Raw)
	if err != nil {
		return 0, err
	}
	vm := b.peerVM(dir, name, format, "memory", true, false)
	t0 := time.Now()
	cmd, err := b.startPeer(vm)
	if err != nil {
		return 0, err
	}
	defer b.endPeer(cmd, dir)
	if err := vm.WaitAgent(ctx, cmd); err != nil {
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
	vm := b.peerVM(dir, name, format, "memory", true, false)
	cmd, err := b.startPeer(vm)
	if err != nil {
		return peerSaved{}, err
	}
	defer func() {
		stopPeer(cmd)
		b.mu.Lock()
		delete(b.peers, cmd)
		b.mu.Unlock()
	}()
	if err := vm.WaitAgent(ctx, cmd); err != nil {
		return peerSaved{}, err
	}
	time.Sleep(200 * time.Millisecond) // let the guest see the host connection go
	if err := vm.Save(ctx, filepath.Join(dir, "state")); err != nil {
		return peerSaved{}, fmt.Errorf("save: %w", err)
	}
	return peerSaved{dir: dir, format: format}, nil
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
	vm := b.peerVM(dir, name, format, filepath.Join(saved.dir, "memory"), false, true)
	t0 := time.Now()
	cmd, err := b.startPeer(vm)
	if err != nil {
		return 0, err
	}
	defer b.endPeer(cmd, dir)
	if err := vm.Load(ctx, filepath.Join(saved.dir, "state")); err != nil {
		return 0, err
	}
	if err := qemu.WithQMP(ctx, dir, func(c *qmp.Client) error { return c.Cont(ctx) }); err != nil {
		return 0, err
	}
	if err := vm.WaitAgent(ctx, cmd); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// ---- idle memory ----
