package server

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/environment/registry"
	"github.com/airlockdev/airlock/internal/guestboot"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
)

// guestbootDir is where the VM environment's boot inputs are kept below
// the data dir, each under the digests of its inputs.
const guestbootDir = "guestboot"

// qemuEnvironment is the QEMU runtime as the runtime of the qemu
// environment, with the digests of its boot inputs.
type qemuEnvironment struct {
	*qemu.Runtime
	inputs registry.Inputs
}

// DefinitionInputs: a VM environment's definition names its kernel,
// initramfs and command line, the guest platform and the snapshot format.
func (e qemuEnvironment) DefinitionInputs() registry.Inputs { return e.inputs }

// openQEMU builds (or finds) the VM boot inputs — the pinned Debian kernel
// and an initramfs whose init is this server's agent — and makes the QEMU
// runtime, probing it with a VM boot (which also detects KVM).
func (r runtimes) openQEMU(ctx context.Context) (*qemuEnvironment, error) {
	dir := r.guestbootDir
	if dir == "" {
		dir = r.dd.join(guestbootDir)
	}
	art, err := guestboot.Build(ctx, guestboot.Options{Dir: dir, Agent: r.agentBin, Uncompressed: true})
	if err != nil {
		return nil, fmt.Errorf("environment qemu: boot inputs: %w", err)
	}
	khz, err := guestboot.HostTSCkHz()
	if err != nil {
		return nil, fmt.Errorf("environment qemu: %w", err)
	}
	// The command line of the environment's definition holds no
	// host-specific value; the runtime adds the TSC's frequency at a TCG
	// launch.
	boot := qemu.Boot{Kernel: art.KernelPath, Initrd: art.InitrdPath, CommandLine: guestboot.KernelCmdline(0), TSCkHz: khz}
	stateRoot := r.dd.join(runtimeDir, string(environment.NameQEMU))
	if r.sandboxDir != "" {
		stateRoot = filepath.Join(r.sandboxDir, string(environment.NameQEMU))
	}
	rt, err := qemu.New(qemu.Config{
		StateRoot: stateRoot,
		Boot:      boot,
		VMIDs:     r.vmIDs,
		Logger:    r.log.With("component", "runtime", "runtime", "qemu"),
	})
	if err != nil {
		return nil, fmt.Errorf("environment qemu: %w", err)
	}
	kd, err := environment.ParseDigest("sha256:" + art.KernelSHA256)
	if err != nil {
		return nil, err
	}
	id, err := environment.ParseDigest("sha256:" + art.InitrdSHA256)
	if err != nil {
		return nil, err
	}
	qe := &qemuEnvironment{Runtime: rt, inputs: registry.Inputs{
		Guest:          environment.Platform{OS: "linux", Arch: "amd64"},
		Boot:           environment.Boot{KernelDigest: kd, InitramfsDigest: id, CommandLine: boot.CommandLine},
		SnapshotFormat: qemu.FormatMigration,
	}}
	return qe, rt.Probe(ctx)
}
