package qemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// probeTimeout bounds one probe VM's boot until its agent answers (TCG
// boots in seconds; a loaded host takes longer).
const probeTimeout = 90 * time.Second

// kvmProbeTimeout bounds the KVM attempt of accelerator detection: a host
// whose /dev/kvm cannot run this kernel (a paravirtual KVM, nested
// virtualisation without the features) fails or hangs early in boot.
const kvmProbeTimeout = 20 * time.Second

// Probe proves that QEMU boots a VM from the boot inputs here and that
// its agent answers over virtio-serial: it boots a throwaway VM over an
// empty root disk and removes it. Without a configured accelerator it
// tries KVM first when /dev/kvm exists and falls back to TCG, and keeps
// what worked (Info's isolation class follows). First it removes the
// helper VMs of live snapshots that a crashed process left (fork.go).
func (r *Runtime) Probe(ctx context.Context) error {
	// At a server's start: helper VMs of live snapshots that a crashed
	// server left (their QEMU, cgroup, uid and directory) go.
	r.sweepForkHelpers(ctx)
	r.mu.Lock()
	accel := r.accel
	r.mu.Unlock()
	if accel != "" {
		return r.probe(ctx, accel, probeTimeout)
	}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		kerr := r.probe(ctx, AccelKVM, kvmProbeTimeout)
		if kerr == nil {
			r.setAccel(AccelKVM)
			return nil
		}
		r.log.InfoContext(ctx, "KVM does not run this guest here; emulating the CPU (TCG) instead", "err", kerr)
	} else {
		r.log.InfoContext(ctx, "no /dev/kvm: VMs run under emulation (TCG)")
	}
	if err := r.probe(ctx, AccelTCG, probeTimeout); err != nil {
		return err
	}
	r.setAccel(AccelTCG)
	return nil
}

func (r *Runtime) setAccel(a Accel) {
	r.mu.Lock()
	r.accel = a
	r.mu.Unlock()
}

func (r *Runtime) probe(ctx context.Context, accel Accel, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	root := filepath.Join(r.stateRoot, probeDir)
	if err := r.cleanProbes(ctx); err != nil {
		return fmt.Errorf("probe qemu: remove an earlier probe's leftovers: %w", err)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	// The owner's pid in the name: cleanProbes leaves the probes of live
	// processes alone.
	name := fmt.Sprintf("probe-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("probe qemu: %w", err)
	}
	defer func() { _ = r.removeVM(context.WithoutCancel(ctx), dir, name) }()
	tree := filepath.Join(root, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return fmt.Errorf("probe qemu: %w", err)
	}
	image, err := r.images.Image(ctx, "probe-empty-tree", tree, vmdisk.MinImageSize)
	if err != nil {
		return fmt.Errorf("probe qemu: %w", err)
	}
	m := machine{
		Accel: accel, CPUs: 1, MemoryMiB: MinMemoryBytes >> 20,
		Kernel: r.boot.Kernel, Initrd: r.boot.Initrd, Cmdline: r.boot.cmdline(accel),
		Disk: filepath.Join(dir, diskFile), Memory: filepath.Join(dir, memoryFile), MemoryShared: true,
	}
	if m.DiskFormat, err = vmdisk.Clone(ctx, image, vmdisk.Raw, m.Disk); err != nil {
		return fmt.Errorf("probe qemu: %w", err)
	}
	m.Chain = chainOver(m.DiskFormat, diskLayer{image, vmdisk.Raw}, nil)
	start := time.Now()
	if _, err := r.launch(ctx, dir, name, m, false); err != nil {
		return fmt.Errorf("probe qemu (%s): %w", accel, err)
	}
	if err := withQMP(ctx, dir, func(c *qmp.Client) error { return c.Cont(ctx) }); err != nil {
		return fmt.Errorf("probe qemu (%s): %w", accel, err)
	}
	if err := waitAgent(ctx, dir, limit, r, false); err != nil {
		return fmt.Errorf("probe qemu (%s): the guest agent did not answer: %w (console: %s)", accel, err, consoleTail(dir))
	}
	r.log.InfoContext(ctx, "QEMU probe VM booted and its agent answered", "accel", accel, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// cleanProbes removes the VMs and directories of probes a crash left (of
// this process, or of one that no longer runs).
func (r *Runtime) cleanProbes(ctx context.Context) error {
	root := filepath.Join(r.stateRoot, probeDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "tree" {
			continue
		}
		var owner int
		if _, err := fmt.Sscanf(e.Name(), "probe-%d-", &owner); err == nil && owner != os.Getpid() && unix.Kill(owner, 0) == nil {
			continue // another live process's probe
		}
		if err := r.removeVM(ctx, filepath.Join(root, e.Name()), e.Name()); err != nil {
			return err
		}
	}
	return nil
}
