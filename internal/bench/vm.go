package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
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
	if err := qemu.WithQMP(ctx, rt.StateDir(id), func(c *qmp.Client) error { return c.Cont(ctx) }); err != nil {
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
