package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/guestboot"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// VMOptions configures RunVM.
type VMOptions struct {
	Runs   int // counted rounds (default 10)
	Warmup int // uncounted rounds before them
	// AgentBinary is the static airlock-agent the guests run (required).
	AgentBinary string
	// GuestbootDir caches the boot inputs (default TempDir/airlock-bench-guestboot,
	// kept between runs: the builds inside are keyed by their inputs).
	GuestbootDir string
	MemoryMiB    int           // guest RAM (default 256)
	Idle         int           // VMs of each kind for the idle-memory figure (default 8; 0 is allowed only with SkipIdle)
	SkipIdle     bool          // measure no idle memory
	IdleWait     time.Duration // how long the idle VMs idle before they are read (default 5 s)
	Busybox      string        // static busybox of the template (default /bin/busybox, else /usr/bin/busybox)
	TempDir      string        // default os.TempDir()
	Progress     io.Writer     // progress lines; nil: none
	Logger       *slog.Logger  // the runtime's warnings; nil: discarded
	Version      string        // airlock's version, for the report
}

// VMReport is the result of RunVM.
type VMReport struct {
	Benchmark string    `json:"benchmark"`
	StartedAt time.Time `json:"started_at"`
	Runs      int       `json:"runs"`
	Warmup    int       `json:"warmup"`
	Accel     string    `json:"accel"`
	MemoryMiB int       `json:"memory_mib"`
	DiskBytes int64     `json:"disk_bytes"`
	Kernel    string    `json:"kernel"`
	Initrd    string    `json:"initrd"`
	Cmdline   string    `json:"cmdline"`
	Host      HostFacts `json:"host"`
	// BaseBuild is the one-off making of the base snapshot (boot, warm-up,
	// save), before the rounds.
	BaseBuildMs float64    `json:"base_build_ms"`
	Figures     []VMFigure `json:"figures"`
	// Phases split the Airlock figures (from the runtime's debug timings
	// and the bench's own clocks), p50 / p95 each.
	Phases map[string][]Phase `json:"phases"`
	// RestoreOverCold is cold create → first output p50 over base-snapshot
	// create → first output p50 (the speed-up; the target is ≥ 8).
	RestoreOverCold float64 `json:"restore_speedup_p50"`
	// PeerRestoreOverBoot is the same ratio for bare QEMU.
	PeerRestoreOverBoot float64 `json:"peer_restore_speedup_p50"`
	// ColdOverPeer is Airlock's cold create p50 over bare QEMU's boot p50.
	ColdOverPeer float64 `json:"cold_over_peer_boot_p50"`
	// BaseOverPeerRestore is Airlock's base-snapshot create p50 over bare
	// QEMU's migration restore p50.
	BaseOverPeerRestore float64 `json:"base_over_peer_restore_p50"`
	// ConfigureRetries is, per Airlock figure, the mean number of times
	// Start's guest configuration found the agent not answering yet (each
	// costs a 100 ms wait in the runtime).
	ConfigureRetries map[string]float64 `json:"configure_retries_mean"`
	Memory           *VMMemoryReport    `json:"idle_memory,omitempty"`
	Met              map[string]bool    `json:"targets_met"`
}

// VMFigure is one measured series.
type VMFigure struct {
	Name   string `json:"name"`
	Method string `json:"method"`
	Stats  Stats  `json:"stats"`
}

// VMMemoryReport is the idle-memory figure: per-VM averages of each QEMU's
// /proc/PID/smaps_rollup.
type VMMemoryReport struct {
	PerKind     int        `json:"vms_per_kind"`
	IdleSeconds float64    `json:"idle_seconds"`
	Clones      VMMemUsage `json:"base_clones"`
	Cold        VMMemUsage `json:"cold_booted"`
}

// VMMemUsage is the average of smaps_rollup fields over VMs, in bytes.
type VMMemUsage struct {
	N            int   `json:"n"`
	Rss          int64 `json:"rss_bytes"`
	Pss          int64 `json:"pss_bytes"`
	PrivateDirty int64 `json:"private_dirty_bytes"`
	PrivateClean int64 `json:"private_clean_bytes"`
	SharedClean  int64 `json:"shared_clean_bytes"`
	SharedDirty  int64 `json:"shared_dirty_bytes"`
	// GuestRAMPss and GuestRAMPrivateDirty are the part of Pss and
	// Private_Dirty in the mapping of guest RAM (the VM's memory file, or
	// the base snapshot's for a clone), from /proc/PID/smaps; the rest is
	// QEMU's own (heap, TCG's translated code, libraries).
	GuestRAMPss          int64 `json:"guest_ram_pss_bytes"`
	GuestRAMPrivateDirty int64 `json:"guest_ram_private_dirty_bytes"`
}

// Names of the figures.
const (
	VMPeerBoot    = "qemu boot → agent answer (bare peer)"
	VMPeerRestore = "qemu -incoming restore → agent answer (bare peer)"
	VMCold        = "airlock cold create → first output"
	VMBase        = "airlock base-snapshot create → first output"
	VMSuspend     = "airlock suspend"
	VMWake        = "airlock wake → first output"
	// VMProfile is a base-snapshot create whose Start is done by hand, step
	// by step with clocks in between (phases only).
	VMProfile = "profile: base-snapshot create, Start's steps by hand"
)

// VMTarget is the target: base-snapshot restore at least 8× faster
// than a cold boot (p50, create → first output).
const VMTarget = "base_restore_ge_8x_faster_than_cold_p50"

const vmDiskBytes = 256 << 20

func (o *VMOptions) check() error {
	if o.Runs == 0 {
		o.Runs = 10
	}
	if o.Runs < 1 || o.Warmup < 0 || o.Idle < 0 {
		return fmt.Errorf("bench: runs (%d) must be at least 1, warm-up runs (%d) and idle VMs (%d) not negative", o.Runs, o.Warmup, o.Idle)
	}
	if o.Idle == 0 && !o.SkipIdle {
		o.Idle = 8
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 256
	}
	if o.MemoryMiB < qemu.MinMemoryBytes>>20 {
		return fmt.Errorf("bench: --memory-mib %d is below the minimum of %d", o.MemoryMiB, qemu.MinMemoryBytes>>20)
	}
	if o.IdleWait == 0 {
		o.IdleWait = 5 * time.Second
	}
	if o.AgentBinary == "" {
		return errors.New("bench: the airlock-agent binary is required")
	}
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
		if _, err := os.Stat(o.Busybox); err != nil {
			o.Busybox = "/usr/bin/busybox"
		}
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.GuestbootDir == "" {
		o.GuestbootDir = filepath.Join(o.TempDir, "airlock-bench-guestboot")
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	for _, b := range []string{"qemu-system-x86_64", "qemu-img", "mkfs.ext4"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("bench: %s is required: %w", b, err)
		}
	}
	return nil
}

// vmBench is one RunVM's state: what it made, so that it can remove it.
type vmBench struct {
	opts     VMOptions
	root     string // the temporary directory everything lives in
	boot     qemu.Boot
	template string
	image    string // the template's ext4 image (the peer's disk)
	cold     *qemu.Runtime
	base     *qemu.Runtime
	timings  *timingHandler

	mu        sync.Mutex
	sandboxes map[model.SandboxID]*qemu.Runtime
	peers     map[*exec.Cmd]struct{}
	seq       int
}

// RunVM runs `airlock bench vm`: in one run, on the same kernel,
// initramfs and template, bare QEMU booting them (and restoring a
// migration stream it saved itself) against Airlock's QEMU runtime
// creating sandboxes cold and from a base snapshot, suspend and wake, and
// the host memory of idle VMs of both kinds. Everything it creates is
// removed when it returns (also when ctx ends).
func RunVM(ctx context.Context, opts VMOptions) (rep VMReport, err error) {
	if err := opts.check(); err != nil {
		return rep, err
	}
	rep = VMReport{
		Benchmark: "microVM create → first output: bare QEMU against Airlock's qemu runtime",
		StartedAt: time.Now().UTC(), Runs: opts.Runs, Warmup: opts.Warmup, MemoryMiB: opts.MemoryMiB, DiskBytes: vmDiskBytes,
		Phases: map[string][]Phase{}, ConfigureRetries: map[string]float64{}, Met: map[string]bool{},
	}
	b := &vmBench{opts: opts, sandboxes: map[model.SandboxID]*qemu.Runtime{}, peers: map[*exec.Cmd]struct{}{}}
	if b.root, err = os.MkdirTemp(opts.TempDir, "airlock-bench-vm-"); err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	defer func() { err = errors.Join(err, b.cleanup()) }()
	if err := b.setup(ctx); err != nil {
		return rep, err
	}
	rep.Accel = string(b.cold.Accel())
	rep.Kernel, rep.Initrd, rep.Cmdline = b.boot.Kernel, b.boot.Initrd, b.boot.CommandLine
	rep.Host = hostFactsVM(ctx, opts.Version)
	rep.Host.Versions = map[string]string{"qemu-system-x86_64": b.cold.Info().Version}

	// The peer's saved state and the base snapshot, once.
	b.progress("preparing the bare QEMU migration stream")
	peerState, err := b.peerSave(ctx)
	if err != nil {
		return rep, err
	}
	b.progress("making the base snapshot (a boot, a warm-up and a save)")
	t0 := time.Now()
	if _, err := b.airlockCreate(ctx, b.base); err != nil {
		return rep, fmt.Errorf("bench: base snapshot: %w", err)
	}
	rep.BaseBuildMs = millis(time.Since(t0))
	b.deleteAll(ctx)

	var peerBoot, peerRestore, cold, baseC, suspend, wake []time.Duration
	ph := map[string]map[string][]time.Duration{VMCold: {}, VMBase: {}, VMWake: {}, VMProfile: {}}
	retries := map[string]int{}
	for i := range opts.Warmup + opts.Runs {
		counted := i >= opts.Warmup
		r, err := b.round(ctx, peerState)
		if err != nil {
			return rep, fmt.Errorf("bench: round %d: %w", i+1, err)
		}
		b.progress("round %d/%d%s: peer boot %s, peer restore %s, cold %s, base %s, suspend %s, wake %s", i+1, opts.Warmup+opts.Runs,
			map[bool]string{true: "", false: " (warm-up)"}[counted], formatDuration(r.peerBoot), formatDuration(r.peerRestore),
			formatDuration(r.cold.total), formatDuration(r.base.total), formatDuration(r.suspend), formatDuration(r.wake.total))
		if !counted {
			continue
		}
		peerBoot, peerRestore = append(peerBoot, r.peerBoot), append(peerRestore, r.peerRestore)
		cold, baseC = append(cold, r.cold.total), append(baseC, r.base.total)
		suspend, wake = append(suspend, r.suspend), append(wake, r.wake.total)
		for name, s := range map[string]createSample{VMCold: r.cold, VMBase: r.base, VMWake: r.wake, VMProfile: r.profile} {
			for k, d := range s.phases {
				ph[name][k] = append(ph[name][k], d)
			}
			retries[name] += s.retries
		}
	}
	rep.Figures = []VMFigure{
		{VMPeerBoot, "qemu-system-x86_64 started on the kernel, initramfs and template disk (same devices, no -S) → the agent's Info answer on its virtio-serial socket", Summarize(peerBoot)},
		{VMPeerRestore, "qemu-system-x86_64 -incoming defer, migrate-incoming of a state it saved (RAM file mapped private, x-ignore-shared), cont → the agent's Info answer", Summarize(peerRestore)},
		{VMCold, "Runtime.Create (NoBaseSnapshots: disk clone, QEMU -S) + Start (cont, guest configuration) + agentclient.Run(echo hello)", Summarize(cold)},
		{VMBase, "Runtime.Create (restore of the base snapshot) + Start + agentclient.Run(echo hello)", Summarize(baseC)},
		{VMSuspend, "Runtime.Suspend of a cold-booted sandbox that ran echo (device state only: its RAM is its own shared file)", Summarize(suspend)},
		{VMWake, "Runtime.Create from the suspend's snapshot + Start + agentclient.Run(echo hello)", Summarize(wake)},
	}
	for _, name := range []string{VMCold, VMBase, VMWake, VMProfile} {
		rep.Phases[name] = phasesOf(ph[name])
	}
	for _, name := range []string{VMCold, VMBase, VMWake} {
		rep.ConfigureRetries[name] = float64(retries[name]) / float64(opts.Runs)
	}
	rep.RestoreOverCold = RatioOf(Summarize(cold).P50, Summarize(baseC).P50)
	rep.PeerRestoreOverBoot = RatioOf(Summarize(peerBoot).P50, Summarize(peerRestore).P50)
	rep.ColdOverPeer = RatioOf(Summarize(cold).P50, Summarize(peerBoot).P50)
	rep.BaseOverPeerRestore = RatioOf(Summarize(baseC).P50, Summarize(peerRestore).P50)
	rep.Met[VMTarget] = rep.RestoreOverCold >= 8

	if !opts.SkipIdle {
		m, err := b.idleMemory(ctx)
		if err != nil {
			return rep, err
		}
		rep.Memory = &m
	}
	return rep, nil
}

// phaseOrder is the order phases are reported in, with what each is.
var phaseOrder = []struct{ name, what string }{
	{"disk", "copy-on-write disk over the template image or the base's frozen disk (runtime log)"},
	{"launch", "QEMU started until its QMP socket exists (runtime log)"},
	{"load", "migrate-incoming of the base's device state until paused (runtime log)"},
	{"create", "Runtime.Create as a whole (bench clock)"},
	{"cont", "Start: QMP cont (runtime log)"},
	{"configure", "Start: agent connection + handshake + guest configuration, retried every 100 ms until the guest answers (runtime log)"},
	{"start", "Runtime.Start as a whole (bench clock)"},
	{"run", "agentclient.Run(echo hello): a new agent connection, the process start and its output (bench clock)"},
	{"p-cont", "profile: QMP cont on a new QMP connection"},
	{"p-answer", "profile: new agent connection → first Info answer (handshake, no retry sleep)"},
	{"p-configure", "profile: the guest configuration PUT (hostname, entropy, time) on that connection"},
	{"p-run-same", "profile: echo hello on that same connection"},
	{"p-run-new", "profile: echo hello on a new agent connection (another virtio-serial port)"},
}

func phasesOf(m map[string][]time.Duration) []Phase {
	var out []Phase
	for _, p := range phaseOrder {
		if s, ok := m[p.name]; ok {
			out = append(out, Phase{Name: p.name, What: p.what, Stats: Summarize(s)})
		}
	}
	return out
}

func (b *vmBench) progress(format string, args ...any) {
	fmt.Fprintf(b.opts.Progress, "bench vm: "+format+"\n", args...)
}

// setup builds the boot inputs (or finds them cached), the busybox
// template and its disk image, and the two runtimes.
func (b *vmBench) setup(ctx context.Context) error {
	b.progress("boot inputs in %s", b.opts.GuestbootDir)
	art, err := guestboot.Build(ctx, guestboot.Options{Dir: b.opts.GuestbootDir, Agent: b.opts.AgentBinary, Uncompressed: true})
	if err != nil {
		return fmt.Errorf("bench: boot inputs: %w", err)
	}
	khz, err := guestboot.HostTSCkHz()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b.boot = qemu.Boot{Kernel: art.KernelPath, Initrd: art.InitrdPath, CommandLine: guestboot.KernelCmdline(khz)}
	b.template = filepath.Join(b.root, "template")
	if err := BusyboxTree(b.template, b.opts.Busybox); err != nil {
		return fmt.Errorf("bench: template: %w", err)
	}
	state := filepath.Join(b.root, "state")
	b.timings = &timingHandler{next: b.opts.Logger.Handler(), store: &timingStore{byID: map[string]map[string]time.Duration{}}}
	log := slog.New(b.timings)
	accel := qemu.AccelTCG
	if _, err := os.Stat("/dev/kvm"); err == nil {
		accel = ""
	}
	if b.cold, err = qemu.New(qemu.Config{StateRoot: state, Boot: b.boot, Accel: accel, NoBaseSnapshots: true, Logger: log}); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if accel == "" {
		b.progress("probing KVM")
		if err := b.cold.Probe(ctx); err != nil {
			return fmt.Errorf("bench: probe: %w", err)
		}
		accel = b.cold.Accel()
	}
	if b.base, err = qemu.New(qemu.Config{StateRoot: state, Boot: b.boot, Accel: accel, Logger: log}); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	images, err := vmdisk.NewImages(filepath.Join(b.root, "peer-images"), b.opts.Logger)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b.progress("template image")
	if b.image, err = images.Image(ctx, b.template, b.template, vmDiskBytes); err != nil {
		return fmt.Errorf("bench: template image: %w", err)
	}
	return nil
}

// BusyboxTree writes a minimal root filesystem at dir: the static busybox
// at /bin/busybox with a symbolic link per applet, the usual empty
// directories, and /etc/passwd, /etc/group and /etc/hosts.
func BusyboxTree(dir, busybox string) error {
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "etc", "root", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky); err != nil { // not 0o1777: os.Chmod takes os.ModeSticky
		return err
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", busybox, err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
		"etc/hosts":  "127.0.0.1 localhost\n::1 localhost\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (b *vmBench) spec() runtime.Spec {
	return runtime.Spec{
		ID:        model.NewSandboxID(),
		RootFS:    runtime.RootFS{Lower: b.template},
		Hostname:  "bench",
		Resources: runtime.Resources{CPUs: 1, MemoryBytes: int64(b.opts.MemoryMiB) << 20, DiskBytes: vmDiskBytes},
	}
}

// vmRound is one round's figures.
type vmRound struct {
	peerBoot, peerRestore time.Duration
	cold, base, wake      createSample
	profile               createSample
	suspend               time.Duration
}

type createSample struct {
	total   time.Duration
	phases  map[string]time.Duration
	retries int // the runtime's "guest agent not answering yet" retries (100 ms each)
}

func (b *vmBench) round(ctx context.Context, peerState peerSaved) (r vmRound, err error) {
	defer b.deleteAll(ctx)
	if r.peerBoot, err = b.peerBoot(ctx); err != nil {
		return r, fmt.Errorf("peer boot: %w", err)
	}
	if r.peerRestore, err = b.peerRestore(ctx, peerState); err != nil {
		return r, fmt.Errorf("peer restore: %w", err)
	}
	cold, err := b.airlockCreate(ctx, b.cold)
	if err != nil {
		return r, fmt.Errorf("cold create: %w", err)
	}
	r.cold = cold.sample
	base, err := b.airlockCreate(ctx, b.base)
	if err != nil {
		return r, fmt.Errorf("base-snapshot create: %w", err)
	}
	r.base = base.sample
	if err := b.delete(ctx, base.spec.ID); err != nil {
		return r, err
	}
	// Suspend and wake the cold-booted sandbox.
	t0 := time.Now()
	snap, err := b.cold.Suspend(ctx, cold.spec.ID)
	if err != nil {
		return r, fmt.Errorf("suspend: %w", err)
	}
	r.suspend = time.Since(t0)
	spec := cold.spec
	spec.Restore = &snap
	if r.wake, err = b.createStartRun(ctx, b.cold, spec); err != nil {
		return r, fmt.Errorf("wake: %w", err)
	}
	if err := b.delete(ctx, spec.ID); err != nil {
		return r, err
	}
	if r.profile, err = b.profileBase(ctx); err != nil {
		return r, fmt.Errorf("profile: %w", err)
	}
	return r, nil
}

// profileBase makes a base-snapshot clone and does Start's work by hand
// (QMP cont, the agent's first answer, the guest configuration) and then
// runs echo on the same and on a new connection, with a clock between each
// step.
func (b *vmBench) profileBase(ctx context.Context) (s createSample, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	rt := b.base
	spec := b.spec()
	id := spec.ID
	b.mu.Lock()
	b.sandboxes[id] = rt
	b.mu.Unlock()
	defer func() { err = errors.Join(err, b.delete(ctx, id)) }()
	b.timings.forget(id.String())
	t0 := time.Now()
	if err := rt.Create(ctx, spec); err != nil {
		return s, err
	}
	t1 := time.Now()
	if err := withPeerQMP(ctx, rt.StateDir(id), func(c *qmp.Client) error { return c.Cont(ctx) }); err != nil {
		return s, err
	}
	t2 := time.Now()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, nil)
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		return s, fmt.Errorf("info: %w", err)
	}
	t3 := time.Now()
	seed := make([]byte, 64)
	for i := range seed {
		seed[i] = byte(i * 7)
	}
	if err := c.ConfigureGuest(ctx, agentproto.GuestConfig{Hostname: spec.Hostname, Entropy: seed, TimeUnixNano: time.Now().UnixNano()}); err != nil {
		return s, fmt.Errorf("configure: %w", err)
	}
	t4 := time.Now()
	res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: peerArgs()})
	if err != nil || string(res.Stdout) != peerOutput {
		return s, fmt.Errorf("echo: %q %w", res.Stdout, err)
	}
	t5 := time.Now()
	if err := runEcho(ctx, rt, id); err != nil {
		return s, err
	}
	t6 := time.Now()
	timings, _ := b.timings.take(id.String())
	s.total = t5.Sub(t0)
	s.phases = map[string]time.Duration{"create": t1.Sub(t0), "p-cont": t2.Sub(t1), "p-answer": t3.Sub(t2), "p-configure": t4.Sub(t3),
		"p-run-same": t5.Sub(t4), "p-run-new": t6.Sub(t5)}
	for k, d := range timings {
		s.phases[k] = d
	}
	return s, nil
}

type created struct {
	spec   runtime.Spec
	sample createSample
}

// airlockCreate makes a new sandbox on rt and times create → first output.
func (b *vmBench) airlockCreate(ctx context.Context, rt *qemu.Runtime) (created, error) {
	spec := b.spec()
	s, err := b.createStartRun(ctx, rt, spec)
	return created{spec, s}, err
}

// createStartRun is Create, Start and `echo hello`, timed as a whole and
// by phase.
func (b *vmBench) createStartRun(ctx context.Context, rt *qemu.Runtime, spec runtime.Spec) (s createSample, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	id := spec.ID
	b.mu.Lock()
	b.sandboxes[id] = rt
	b.mu.Unlock()
	b.timings.forget(id.String())
	t0 := time.Now()
	if err := rt.Create(ctx, spec); err != nil {
		return s, err
	}
	t1 := time.Now()
	if err := rt.Start(ctx, id); err != nil {
		return s, err
	}
	t2 := time.Now()
	if err := runEcho(ctx, rt, id); err != nil {
		return s, err
	}
	t3 := time.Now()
	s.total = t3.Sub(t0)
	s.phases = map[string]time.Duration{"create": t1.Sub(t0), "start": t2.Sub(t1), "run": t3.Sub(t2)}
	timings, retries := b.timings.take(id.String())
	for k, d := range timings {
		s.phases[k] = d
	}
	s.retries = retries
	return s, nil
}

// runEcho runs `echo hello` in the sandbox through a new agent client.
func runEcho(ctx context.Context, rt *qemu.Runtime, id model.SandboxID) error {
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, nil)
	defer c.Close()
	res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: peerArgs()})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || string(res.Stdout) != peerOutput {
		return fmt.Errorf("echo hello: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	return nil
}

func (b *vmBench) delete(ctx context.Context, id model.SandboxID) error {
	b.mu.Lock()
	rt := b.sandboxes[id]
	delete(b.sandboxes, id)
	b.mu.Unlock()
	if rt == nil {
		return nil
	}
	return rt.Delete(context.WithoutCancel(ctx), id)
}

// deleteAll deletes every sandbox made so far.
func (b *vmBench) deleteAll(ctx context.Context) error {
	b.mu.Lock()
	ids := make([]model.SandboxID, 0, len(b.sandboxes))
	for id := range b.sandboxes {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, b.delete(ctx, id))
	}
	return errors.Join(errs...)
}

// cleanup removes everything: sandboxes, peer VMs, the temporary
// directory; then checks that no QEMU of this run is left.
func (b *vmBench) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := []error{b.deleteAll(ctx)}
	b.mu.Lock()
	for cmd := range b.peers {
		stopPeer(cmd)
		delete(b.peers, cmd)
	}
	b.mu.Unlock()
	if left := processesMentioning(b.root); len(left) > 0 {
		for _, pid := range left {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
		errs = append(errs, fmt.Errorf("bench: QEMU processes of this run were still there and were killed: %v", left))
	}
	errs = append(errs, os.RemoveAll(b.root))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: cleanup: %w", err)
	}
	return nil
}

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
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && (st[i+2] == 'Z' || st[i+2] == 'X') {
				continue
			}
		}
		pids = append(pids, pid)
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
		if cmd.ProcessState != nil || !processAlive(cmd.Process.Pid) {
			return fmt.Errorf("qemu exited: %s", fileTail(filepath.Join(dir, "qemu.log")))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no agent answer: %w (last: %w; console: %s)", ctx.Err(), err, fileTail(filepath.Join(dir, "console.log")))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func processAlive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return i > 0 && i+2 < len(st) && st[i+2] != 'Z' && st[i+2] != 'X'
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

func (b *vmBench) idleMemory(ctx context.Context) (VMMemoryReport, error) {
	defer b.deleteAll(ctx)
	m := VMMemoryReport{PerKind: b.opts.Idle, IdleSeconds: b.opts.IdleWait.Seconds()}
	var clones, colds []model.SandboxID
	for i := range b.opts.Idle {
		b.progress("idle memory: base clone %d/%d", i+1, b.opts.Idle)
		c, err := b.airlockCreate(ctx, b.base)
		if err != nil {
			return m, fmt.Errorf("bench: idle clone: %w", err)
		}
		clones = append(clones, c.spec.ID)
	}
	for i := range b.opts.Idle {
		b.progress("idle memory: cold VM %d/%d", i+1, b.opts.Idle)
		c, err := b.airlockCreate(ctx, b.cold)
		if err != nil {
			return m, fmt.Errorf("bench: idle cold VM: %w", err)
		}
		colds = append(colds, c.spec.ID)
	}
	b.progress("idle memory: %d VMs idle for %s", 2*b.opts.Idle, b.opts.IdleWait)
	select {
	case <-time.After(b.opts.IdleWait):
	case <-ctx.Done():
		return m, ctx.Err()
	}
	var err error
	if m.Clones, err = b.usage(ctx, b.base, clones); err != nil {
		return m, err
	}
	if m.Cold, err = b.usage(ctx, b.cold, colds); err != nil {
		return m, err
	}
	return m, nil
}

func (b *vmBench) usage(ctx context.Context, rt *qemu.Runtime, ids []model.SandboxID) (VMMemUsage, error) {
	var sum VMMemUsage
	for _, id := range ids {
		st, err := rt.State(ctx, id)
		if err != nil {
			return sum, fmt.Errorf("bench: %w", err)
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", st.Pid))
		if err != nil {
			return sum, fmt.Errorf("bench: %w", err)
		}
		u, err := parseSmapsRollup(string(raw))
		if err != nil {
			return sum, fmt.Errorf("bench: qemu %d: %w", st.Pid, err)
		}
		smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", st.Pid))
		if err != nil {
			return sum, fmt.Errorf("bench: %w", err)
		}
		u.GuestRAMPss, u.GuestRAMPrivateDirty = guestRAMUsage(string(smaps), func(path string) bool {
			return strings.HasPrefix(path, b.root+"/") && filepath.Base(path) == "memory"
		})
		sum.GuestRAMPss += u.GuestRAMPss
		sum.GuestRAMPrivateDirty += u.GuestRAMPrivateDirty
		sum.Rss += u.Rss
		sum.Pss += u.Pss
		sum.PrivateDirty += u.PrivateDirty
		sum.PrivateClean += u.PrivateClean
		sum.SharedClean += u.SharedClean
		sum.SharedDirty += u.SharedDirty
		sum.N++
	}
	if sum.N == 0 {
		return sum, nil
	}
	n := int64(sum.N)
	return VMMemUsage{N: sum.N, Rss: sum.Rss / n, Pss: sum.Pss / n, PrivateDirty: sum.PrivateDirty / n,
		PrivateClean: sum.PrivateClean / n, SharedClean: sum.SharedClean / n, SharedDirty: sum.SharedDirty / n,
		GuestRAMPss: sum.GuestRAMPss / n, GuestRAMPrivateDirty: sum.GuestRAMPrivateDirty / n}, nil
}

// guestRAMUsage sums Pss and Private_Dirty over the mappings of
// /proc/PID/smaps content whose path ram accepts.
func guestRAMUsage(smaps string, ram func(path string) bool) (pss, privateDirty int64) {
	in := false
	for _, line := range strings.Split(smaps, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header: range perms offset dev inode [path]
			in = len(f) >= 6 && ram(strings.Join(f[5:], " "))
			continue
		}
		if !in || len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Pss:":
			pss += kb << 10
		case "Private_Dirty:":
			privateDirty += kb << 10
		}
	}
	return pss, privateDirty
}

// parseSmapsRollup reads the fields of /proc/PID/smaps_rollup content.
func parseSmapsRollup(s string) (VMMemUsage, error) {
	var u VMMemUsage
	fields := map[string]*int64{"Rss": &u.Rss, "Pss": &u.Pss, "Private_Dirty": &u.PrivateDirty,
		"Private_Clean": &u.PrivateClean, "Shared_Clean": &u.SharedClean, "Shared_Dirty": &u.SharedDirty}
	seen := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		p, ok := fields[strings.TrimSpace(k)]
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || unit != "kB" {
			return u, fmt.Errorf("smaps_rollup: %s: unexpected value %q", k, strings.TrimSpace(v))
		}
		*p = kb << 10
		seen++
	}
	if seen != len(fields) {
		return u, fmt.Errorf("smaps_rollup: %d of the %d fields found", seen, len(fields))
	}
	return u, nil
}

// ---- the runtime's debug timings ----

// timingHandler collects the qemu runtime's debug timings ("restored the
// base snapshot": disk, launch, load; "started": cont, configure) per
// sandbox and passes warnings and errors on.
type timingHandler struct {
	next  slog.Handler
	attrs []slog.Attr
	store *timingStore
}

type timingStore struct {
	mu   sync.Mutex
	byID map[string]map[string]time.Duration
	// retries counts "guest agent not answering yet" (the runtime's
	// retryConfigure waits 100 ms after each) since the last take.
	retries int
}

func (h *timingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *timingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "guest agent not answering yet" {
		h.store.mu.Lock()
		h.store.retries++
		h.store.mu.Unlock()
	}
	if r.Message == "restored the base snapshot" || r.Message == "started" {
		var id string
		got := map[string]time.Duration{}
		collect := func(a slog.Attr) bool {
			switch a.Key {
			case "sandbox":
				id = fmt.Sprint(a.Value.Any())
			case "disk", "launch", "load", "cont", "configure":
				if a.Value.Kind() == slog.KindDuration {
					got[a.Key] = a.Value.Duration()
				}
			}
			return true
		}
		for _, a := range h.attrs {
			collect(a)
		}
		r.Attrs(collect)
		if id != "" {
			h.store.mu.Lock()
			if h.store.byID[id] == nil {
				h.store.byID[id] = map[string]time.Duration{}
			}
			for k, d := range got {
				h.store.byID[id][k] = d
			}
			h.store.mu.Unlock()
		}
	}
	if r.Level >= slog.LevelWarn && h.next.Enabled(ctx, r.Level) {
		return h.next.WithAttrs(h.attrs).Handle(ctx, r)
	}
	return nil
}

func (h *timingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *timingHandler) WithGroup(string) slog.Handler { return h }

// take returns the timings of sandbox id and the retries counted since
// the last take (the bench runs one sandbox operation at a time).
func (h *timingHandler) take(id string) (map[string]time.Duration, int) {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	m := h.store.byID[id]
	delete(h.store.byID, id)
	n := h.store.retries
	h.store.retries = 0
	return m, n
}

func (h *timingHandler) forget(id string) { h.take(id) }

// ---- host facts and output ----

func hostFactsVM(ctx context.Context, version string) HostFacts {
	cg, _ := cgroups.Detect() // only reported
	return hostFacts(ctx, cg, nil, version)
}

// WriteJSON writes the report as indented JSON.
func (r VMReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r VMReport) WriteTable(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "%s\n", r.Benchmark)
	fmt.Fprintf(bw, "accelerator %s, 1 vCPU, %d MiB RAM, %d MiB disk; %d rounds after %d warm-up rounds\n\n", r.Accel, r.MemoryMiB, r.DiskBytes>>20, r.Runs, r.Warmup)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tN\tP50\tP95\tMIN\tMAX\tMEAN")
	for _, f := range r.Figures {
		st := f.Stats
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", f.Name, st.N, formatDuration(st.P50), formatDuration(st.P95),
			formatDuration(st.Min), formatDuration(st.Max), formatDuration(st.Mean))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(bw, "\nbase snapshot made once in %s (not in the figures)\n", formatDuration(fromMillis(r.BaseBuildMs)))
	fmt.Fprintf(bw, "restore speed-up (cold p50 / base-snapshot p50): %.2f×; target ≥ 8×: %v\n", r.RestoreOverCold, r.Met[VMTarget])
	fmt.Fprintf(bw, "bare QEMU: boot p50 / restore p50: %.2f×\n", r.PeerRestoreOverBoot)
	fmt.Fprintf(bw, "airlock over bare QEMU (p50): cold %.2f× its boot, base-snapshot %.2f× its restore\n", r.ColdOverPeer, r.BaseOverPeerRestore)

	for _, name := range []string{VMCold, VMBase, VMWake, VMProfile} {
		ps := r.Phases[name]
		if len(ps) == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n%s, phases p50 / p95:\n", name)
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		for _, p := range ps {
			fmt.Fprintf(tw, "  %s\t%s / %s\t%s\n", p.Name, formatDuration(p.Stats.P50), formatDuration(p.Stats.P95), p.What)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if n, ok := r.ConfigureRetries[name]; ok {
			fmt.Fprintf(bw, "  guest configuration retries (agent not answering yet, 100 ms each): %.2f per create\n", n)
		}
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(bw, "\nhost memory per idle VM (QEMU's smaps_rollup, average of %d each, after %.0f s idle):\n", m.PerKind, m.IdleSeconds)
		tw = tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tRSS\tPSS\tPRIVATE_DIRTY\tPRIVATE_CLEAN\tSHARED_CLEAN\tSHARED_DIRTY\tGUEST RAM PSS\tGUEST RAM PRIVATE_DIRTY")
		for _, row := range []struct {
			name string
			u    VMMemUsage
		}{{"base-snapshot clone", m.Clones}, {"cold-booted", m.Cold}} {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row.name, mib(row.u.Rss), mib(row.u.Pss), mib(row.u.PrivateDirty),
				mib(row.u.PrivateClean), mib(row.u.SharedClean), mib(row.u.SharedDirty), mib(row.u.GuestRAMPss), mib(row.u.GuestRAMPrivateDirty))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(bw, "\nWhat was timed:\n")
	for _, f := range r.Figures {
		fmt.Fprintf(bw, "  %s: %s\n", f.Name, f.Method)
	}
	fmt.Fprintf(bw, "kernel %s, initramfs %s\ncommand line %s\n", r.Kernel, r.Initrd, r.Cmdline)
	fmt.Fprintf(bw, "\nHost: %s\n", r.Host)
	return bw.err
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
