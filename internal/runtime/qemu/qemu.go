// Package qemu implements runtime.Runtime on QEMU's microvm machine: every
// sandbox is a virtual machine with its own Linux kernel, booted from the
// execution environment's kernel and initramfs (internal/guestboot), whose
// root disk is a copy-on-write disk over its template's ext4 image
// (internal/vmdisk) and whose guest agent speaks agentproto over a
// virtio-serial port. QEMU runs in a session of its own under its own
// seccomp filter (no fork, exec or setuid), so VMs outlive the server; a
// restarted server finds them again by their pid files.
//
// Hardware acceleration (KVM) is used where /dev/kvm really runs a VM
// (Probe boots one); elsewhere QEMU emulates the CPU (TCG), which is slow but
// the same code path.
//
// Per-sandbox state lives in StateRoot/<sandbox id>/:
//
//	machine.json   how QEMU is started (machine): resources, disk, memory, network
//	disk           the root disk (qcow2, or a raw reflink clone), copy-on-write over the template's image (or
//	               over a base snapshot's frozen disk)
//	memory         guest RAM (memory-backend-file, shared): a suspend keeps it
//	               and saves only the device state
//	qmp.sock       QMP (control)
//	agent.sock     the virtio-serial port of the guest agent
//	qemu.stderr    a pipe (FIFO): QEMU's stdout and stderr, drained into qemu.log
//	qemu.log       QEMU's own messages: the last 64 KiB drained from the pipe
//	qemu.pid       QEMU's pid (written by the runtime)
//	uid            the VM's host uid and gid (reserved in StateRoot/.uids)
//	created        written once the VM is made whole (held before boot, or restored)
//	started        written once the guest was let run (cont)
//	snapshot/      a suspended sandbox's device state and snapshot.json
//
// and shared state in StateRoot/.images (template disk images, built once
// per template and disk size), StateRoot/.base (base snapshots, one per
// template × size, that creates restore instead of booting) and
// StateRoot/.uids (one file per VM uid in use, naming its VM's directory).
//
// QEMU runs as the VM's own uid with no capabilities, in the cgroup
// CgroupParent/<VM name> (memory, CPU and pids limits), and opens nothing
// by path it was not handed by the runtime: see confine.go.
package qemu

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/guestboot"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// Name is the runtime's name in runtime.Info.
const Name = "qemu"

// Accel is how QEMU runs guest code.
type Accel string

// Accelerators.
const (
	AccelKVM Accel = "kvm" // hardware virtualisation
	AccelTCG Accel = "tcg" // emulation (no KVM)
)

// ParseAccel parses "kvm", "tcg" or "" (detect).
func ParseAccel(s string) (Accel, error) {
	switch a := Accel(s); a {
	case "", AccelKVM, AccelTCG:
		return a, nil
	}
	return "", fmt.Errorf("unknown QEMU accelerator %q (want kvm or tcg)", s)
}

// Defaults for resources a spec leaves at zero.
const (
	DefaultMemoryBytes = 256 << 20
	DefaultDiskBytes   = 2 << 30
	// MinMemoryBytes is the least guest RAM the kernel and agent boot in.
	MinMemoryBytes = 128 << 20
)

// Boot is what every VM of the runtime boots.
type Boot struct {
	Kernel      string // host path of the kernel (bzImage)
	Initrd      string // host path of the initramfs (guestinit and the agent)
	CommandLine string // kernel command line
	// TSCkHz is the host TSC's frequency, given to the guest kernel under
	// TCG (guestboot.TSCParam), where it cannot calibrate one; not part of
	// CommandLine, which names the environment and must not vary by host.
	TSCkHz int
}

// cmdline is the kernel command line of a boot with accel.
func (b Boot) cmdline(accel Accel) string {
	if accel == AccelTCG && b.TSCkHz > 0 {
		return b.CommandLine + " " + guestboot.TSCParam(b.TSCkHz)
	}
	return b.CommandLine
}

// vmIDRules are the VM id pool's (Config.VMIDs) defaults and bounds: a
// block is one id.
var vmIDRules = runtime.IDPoolRules{What: "qemu: VM id pool", Base: DefaultVMIDBase, Count: DefaultVMIDCount, BlockSize: 1, MinBase: 65536}

// Config configures a Runtime.
type Config struct {
	// Binary is qemu-system-x86_64; "" looks it up in PATH.
	Binary string
	// StateRoot holds one directory per sandbox and the shared .images
	// and .base directories.
	StateRoot string
	Boot      Boot
	// Accel: "" detects (KVM when /dev/kvm exists and Probe's VM runs on
	// it, else TCG).
	Accel Accel
	// NoBaseSnapshots turns base-snapshot creates off: every create boots.
	NoBaseSnapshots bool
	// VMIDs is the pool of host uids (and gids) VMs' QEMU processes run
	// as, one per VM.
	VMIDs  runtime.IDPool
	Logger *slog.Logger
}

// Runtime drives QEMU microVMs. It is safe for concurrent use; operations
// on one sandbox are serialised.
type Runtime struct {
	binary    string
	version   string
	stateRoot string
	boot      Boot
	images    *vmdisk.Images
	noBase    bool
	log       *slog.Logger
	ports     *portPool
	ids       runtime.IDPool
	cg        cgroups.Host
	logs      logReaders

	memMu    sync.Mutex
	baseMems map[string]*os.File // sealed memfds of base snapshots' RAM, by RAM file

	mu    sync.Mutex
	accel Accel
	locks map[model.SandboxID]*sync.Mutex
	bases map[string]chan struct{} // per base-snapshot key
}

// New checks the configuration and the QEMU binary and returns a Runtime.
// It boots nothing: Probe does.
func New(cfg Config) (*Runtime, error) {
	if cfg.StateRoot == "" || !filepath.IsAbs(cfg.StateRoot) {
		return nil, fmt.Errorf("qemu: StateRoot %q must be an absolute path", cfg.StateRoot)
	}
	if cfg.Boot.Kernel == "" || cfg.Boot.Initrd == "" {
		return nil, errors.New("qemu: the boot inputs (kernel and initramfs) are required")
	}
	for _, p := range []string{cfg.Boot.Kernel, cfg.Boot.Initrd} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("qemu: boot input: %w", err)
		}
	}
	bin := cfg.Binary
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("qemu: %s not found (Debian package qemu-system-x86): %w", bin, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, err
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("qemu: %s --version: %w", path, err)
	}
	version := parseVersion(string(out))
	ids, err := cfg.VMIDs.WithDefaults(vmIDRules)
	if err != nil {
		return nil, err
	}
	cg, err := cgroups.Detect()
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	if err := os.MkdirAll(cfg.StateRoot, 0o700); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	images, err := vmdisk.NewImages(filepath.Join(cfg.StateRoot, imagesDir), log.With("component", "vmdisk"))
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	return &Runtime{
		binary:    path,
		version:   version,
		stateRoot: cfg.StateRoot,
		boot:      cfg.Boot,
		images:    images,
		noBase:    cfg.NoBaseSnapshots,
		accel:     cfg.Accel,
		log:       log,
		ports:     newPortPool(),
		ids:       ids,
		cg:        cg,
		logs:      logReaders{m: map[string]*os.File{}},
		baseMems:  map[string]*os.File{},
		locks:     map[model.SandboxID]*sync.Mutex{},
		bases:     map[string]chan struct{}{},
	}, nil
}

// parseVersion takes "QEMU emulator version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u18)".
func parseVersion(out string) string {
	line, _, _ := strings.Cut(out, "\n")
	if _, v, ok := strings.Cut(line, "version "); ok {
		return strings.TrimSpace(v)
	}
	return strings.TrimSpace(line)
}

// Capabilities of the QEMU runtime: pause (QMP stop/cont), memory
// checkpoint (a suspend saves the VM's device state; its RAM is a file
// already), on request a filesystem-only suspend (the guest syncs, the VM
// stops, its disk stays and a wake boots it again: fssuspend.go), a
// prepared network (a TAP device in the sandbox's netns) and live
// snapshots whose forks continue the source's memory (fork.go).
func Capabilities() runtime.Capabilities {
	return runtime.NewCapabilities(runtime.CapPause, runtime.CapCheckpoint, runtime.CapFilesystemSnapshot, runtime.CapNetwork, runtime.CapLiveSnapshot)
}

// Info describes the runtime. The isolation class follows the accelerator:
// a VM is a hardware VM under KVM and an emulated one under TCG.
func (r *Runtime) Info() runtime.Info {
	iso := environment.IsolationEmulatedVM
	if r.Accel() == AccelKVM {
		iso = environment.IsolationHardwareVM
	}
	return runtime.Info{
		Name:         Name,
		Version:      r.version,
		Binary:       r.binary,
		Isolation:    iso,
		OOMScope:     environment.OOMKillsProcess, // the guest kernel's OOM killer
		Capabilities: Capabilities(),
	}
}

// Accel is the accelerator VMs run with (AccelTCG until a probe found KVM
// working, when none was configured).
func (r *Runtime) Accel() Accel {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.accel == "" {
		return AccelTCG
	}
	return r.accel
}

// Boot returns the boot inputs.
func (r *Runtime) Boot() Boot { return r.boot }

func (r *Runtime) lock(id model.SandboxID) func() {
	r.mu.Lock()
	l, ok := r.locks[id]
	if !ok {
		l = &sync.Mutex{}
		r.locks[id] = l
	}
	r.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Names below StateRoot.
const (
	imagesDir = ".images"
	baseDir   = ".base"
	probeDir  = ".probe"
)

// Names inside a sandbox's directory.
const (
	machineFile  = "machine.json"
	diskFile     = "disk"
	memoryFile   = "memory"
	qmpSocket    = "qmp.sock"
	agentSocket  = "agent.sock"
	pidFile      = "qemu.pid"
	createdFile  = "created"
	startedFile  = "started"
	snapshotDir  = "snapshot"
	snapshotMeta = "snapshot.json"
	stateFile    = "state"
)

func (r *Runtime) dir(id model.SandboxID) string { return filepath.Join(r.stateRoot, id.String()) }

// StateDir is the directory of a sandbox's state (for tests and tools).
func (r *Runtime) StateDir(id model.SandboxID) string { return r.dir(id) }
