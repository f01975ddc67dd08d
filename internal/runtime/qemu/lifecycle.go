package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// Create makes the sandbox's VM without letting it run: from its base
// snapshot (template × size) when there is one, restored paused, else a
// cold boot held before the first instruction (-S). Start lets it run.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) error {
	if _, err := model.ParseSandboxID(spec.ID.String()); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if spec.RootFS.Lower == "" {
		return errors.New("create: the spec has no root filesystem")
	}
	if len(spec.Volumes) > 0 {
		// A volume's ext4 is mounted on the host and shared by the
		// node's sandboxes: attaching its image to a VM as well would
		// mount one filesystem twice.
		return fmt.Errorf("create %s: volume mounts: %w", spec.ID, runtime.ErrNotSupported)
	}
	unlock := r.lock(spec.ID)
	defer unlock()
	dir := r.dir(spec.ID)
	name := spec.ID.String()
	if spec.Restore != nil {
		return r.restore(ctx, spec)
	}
	if exists(filepath.Join(dir, snapshotDir, snapshotMeta)) {
		return fmt.Errorf("create %s: the sandbox is suspended: it is made again only from its snapshot", spec.ID)
	}
	if pid := vmPid(dir, name); pid != 0 && !exists(filepath.Join(dir, createdFile)) && !exists(filepath.Join(dir, startedFile)) {
		// A create that crashed between starting QEMU and the end of
		// its restore: a leftover, made again below.
		if err := killVM(ctx, pid, name); err != nil {
			return fmt.Errorf("create %s: end a leftover QEMU: %w", spec.ID, err)
		}
	}
	if pid := vmPid(dir, name); pid != 0 {
		st, err := r.stateLocked(ctx, spec.ID)
		if err != nil {
			return fmt.Errorf("create %s: %w", spec.ID, err)
		}
		if st.Phase == runtime.PhaseCreated || st.Phase == runtime.PhaseRunning {
			return nil
		}
		return fmt.Errorf("create %s: the sandbox exists and is %s", spec.ID, st.Phase)
	}
	// A VM that was let run and whose QEMU is gone is a stopped
	// sandbox: Create refuses it (runtime.Runtime.Create).
	if exists(filepath.Join(dir, startedFile)) {
		return fmt.Errorf("create %s: the sandbox exists and is %s", spec.ID, runtime.PhaseStopped)
	}
	// Leftovers of a create that crashed half-way.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("create %s: remove leftovers: %w", spec.ID, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", spec.ID, err)
	}
	var err error
	if spec.From != nil {
		err = r.createFrom(ctx, dir, spec)
	} else {
		err = r.create(ctx, dir, spec)
	}
	if err != nil {
		r.removeVM(context.WithoutCancel(ctx), dir, name)
		return fmt.Errorf("create %s: %w", spec.ID, err)
	}
	return nil
}

func (r *Runtime) create(ctx context.Context, dir string, spec runtime.Spec) error {
	m, err := r.machineFor(ctx, spec)
	if err != nil {
		return err
	}
	if base, ok := r.baseFor(ctx, spec, m); ok {
		if err := r.createFromBase(ctx, dir, spec, m, base); err == nil {
			return markCreated(dir, fromSnapshot)
		} else {
			r.log.WarnContext(ctx, "create from the base snapshot failed; booting instead", "sandbox", spec.ID, "base", base.dir, "err", err)
			r.removeVM(context.WithoutCancel(ctx), dir, spec.ID.String())
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
		}
	}
	image, err := r.templateImage(ctx, spec)
	if err != nil {
		return err
	}
	m.Disk = filepath.Join(dir, diskFile)
	if m.DiskFormat, err = vmdisk.Clone(ctx, image, vmdisk.Raw, m.Disk); err != nil {
		return err
	}
	m.Chain = chainOver(m.DiskFormat, diskLayer{image, vmdisk.Raw}, nil)
	m.Memory, m.MemoryShared = filepath.Join(dir, memoryFile), true
	if err := writeMachine(dir, m); err != nil {
		return err
	}
	if _, err = r.launch(ctx, dir, spec.ID.String(), m, false); err != nil {
		return err
	}
	return markCreated(dir, booted)
}

// How a VM was made: its created marker's content.
const (
	booted       = ""
	fromSnapshot = "snapshot\n" // restored from a base snapshot
	forked       = "fork\n"     // restored from a live snapshot (Spec.From)
)

// markCreated records that the VM in dir was made whole (booting held
// before its first instruction, or restored and paused), and how: a live
// QEMU without it is a crashed create's leftover.
func markCreated(dir, how string) error {
	return os.WriteFile(filepath.Join(dir, createdFile), []byte(how), 0o600)
}

// CreatedFromSnapshot reports whether the sandbox's VM was restored from
// a base snapshot at its create rather than booted.
func (r *Runtime) CreatedFromSnapshot(id model.SandboxID) bool {
	b, err := os.ReadFile(filepath.Join(r.dir(id), createdFile))
	return err == nil && string(b) == fromSnapshot
}

// machineFor is the machine of a spec without its disk and memory.
func (r *Runtime) machineFor(ctx context.Context, spec runtime.Spec) (machine, error) {
	mem := spec.Resources.MemoryBytes
	if mem == 0 {
		mem = DefaultMemoryBytes
	}
	if mem < MinMemoryBytes {
		return machine{}, fmt.Errorf("%w: a VM needs at least %d MiB of memory, the spec asks for %d MiB", model.ErrInvalid, MinMemoryBytes>>20, mem>>20)
	}
	cpus := max(spec.Resources.CPUs, 1)
	m := machine{
		Accel:     r.Accel(),
		CPUs:      cpus,
		MemoryMiB: (mem + 1<<20 - 1) >> 20,
		Kernel:    r.boot.Kernel,
		Initrd:    r.boot.Initrd,
		Cmdline:   r.boot.cmdline(r.Accel()),
		Guest: guestSettings{
			Hostname: spec.Hostname,
			Env:      spec.Env.List(),
			PidsMax:  spec.Resources.PidsLimit,
		},
	}
	if n := spec.Network; n != nil {
		link, err := attachTAP(ctx, n.NetnsPath)
		if err != nil {
			return machine{}, fmt.Errorf("network: %w", err)
		}
		m.NIC, m.Netns, m.TAP, m.MAC = true, n.NetnsPath, link.TAP, link.MAC.String()
		m.Guest.Address = n.GuestAddr.String()
		m.Guest.Gateway = n.Gateway.String()
		if n.DNS.IsValid() {
			m.Guest.DNS = n.DNS.String()
		}
		m.Guest.CACert = n.CACertPEM
	}
	return m, nil
}

func diskBytes(spec runtime.Spec) int64 {
	if spec.Resources.DiskBytes > 0 {
		return spec.Resources.DiskBytes
	}
	return DefaultDiskBytes
}

// templateImage is the template's ext4 image at the sandbox's disk size.
func (r *Runtime) templateImage(ctx context.Context, spec runtime.Spec) (string, error) {
	return r.images.Image(ctx, spec.RootFS.Lower, spec.RootFS.Lower, diskBytes(spec))
}

// Start lets a created VM run and hands the guest its settings (hostname,
// environment, network, fresh entropy, the time) through its agent.
// Starting a running VM is a no-op; starting a paused one is an error.
func (r *Runtime) Start(ctx context.Context, id model.SandboxID) error {
	t0 := time.Now()
	m, err := r.startLocked(ctx, id)
	if err != nil {
		return err
	}
	t1 := time.Now()
	err = r.configureGuest(ctx, id, m.Guest)
	r.log.DebugContext(ctx, "started", "sandbox", id, "cont", t1.Sub(t0), "configure", time.Since(t1), "err", err)
	return err
}

func (r *Runtime) startLocked(ctx context.Context, id model.SandboxID) (machine, error) {
	unlock := r.lock(id)
	defer unlock()
	dir := r.dir(id)
	if !exists(dir) {
		return machine{}, fmt.Errorf("start %s: %w", id, runtime.ErrNotFound)
	}
	if vmPid(dir, id.String()) == 0 {
		return machine{}, fmt.Errorf("start %s: the sandbox is stopped (console: %s)", id, consoleTail(dir))
	}
	m, err := readMachine(dir)
	if err != nil {
		return machine{}, fmt.Errorf("start %s: %w", id, err)
	}
	started := exists(filepath.Join(dir, startedFile))
	if !started && !exists(filepath.Join(dir, createdFile)) {
		return machine{}, fmt.Errorf("start %s: the VM was not made whole (a create that crashed): create it again", id)
	}
	err = withQMP(ctx, dir, func(c *qmp.Client) error {
		st, err := c.WaitStatus(ctx, 5*time.Millisecond, func(s qmp.Status) bool { return s.Status != qmp.StatusInMigrate })
		if err != nil {
			return err
		}
		switch {
		case st.Running:
			return nil
		case started && st.Status == qmp.StatusPaused:
			return fmt.Errorf("the sandbox is paused (resume it)")
		case st.Status == qmp.StatusPaused || st.Status == qmp.StatusPrelaunch || st.Status == qmp.StatusPostMigrate:
			return c.Cont(ctx)
		default:
			return fmt.Errorf("the VM is %s", st.Status)
		}
	})
	if err != nil {
		return machine{}, fmt.Errorf("start %s: %w", id, err)
	}
	if !started {
		if err := os.WriteFile(filepath.Join(dir, startedFile), nil, 0o600); err != nil {
			return machine{}, fmt.Errorf("start %s: %w", id, err)
		}
	}
	return m, nil
}

// State reports the VM's phase: created until Start let it run, then what
// QMP says (running or paused); stopped when its directory is there but no
// QEMU runs; ErrNotFound for an unknown or a suspended sandbox.
func (r *Runtime) State(ctx context.Context, id model.SandboxID) (runtime.Status, error) {
	unlock := r.lock(id)
	defer unlock()
	return r.stateLocked(ctx, id)
}

func (r *Runtime) stateLocked(ctx context.Context, id model.SandboxID) (runtime.Status, error) {
	dir := r.dir(id)
	if !exists(dir) {
		return runtime.Status{}, fmt.Errorf("state of %s: %w", id, runtime.ErrNotFound)
	}
	pid := vmPid(dir, id.String())
	r.drainLog(dir)
	if pid == 0 {
		if exists(filepath.Join(dir, snapshotDir, snapshotMeta)) {
			return runtime.Status{}, fmt.Errorf("state of %s: suspended: %w", id, runtime.ErrNotFound)
		}
		if !exists(filepath.Join(dir, machineFile)) { // a create's leftovers: no sandbox
			return runtime.Status{}, fmt.Errorf("state of %s: %w", id, runtime.ErrNotFound)
		}
		return runtime.Status{ID: id, Phase: runtime.PhaseStopped}, nil
	}
	st := runtime.Status{ID: id, Pid: pid, Phase: runtime.PhaseCreated}
	if !exists(filepath.Join(dir, startedFile)) {
		if !exists(filepath.Join(dir, createdFile)) {
			st.Phase = runtime.PhaseStopped // a crashed create's leftover
		}
		return st, nil
	}
	var qs qmp.Status
	if err := withQMP(ctx, dir, func(c *qmp.Client) (err error) {
		qs, err = c.QueryStatus(ctx)
		return err
	}); err != nil {
		if vmPid(dir, id.String()) == 0 { // exited meanwhile
			return runtime.Status{ID: id, Phase: runtime.PhaseStopped}, nil
		}
		return runtime.Status{}, fmt.Errorf("state of %s: %w", id, err)
	}
	switch {
	case qs.Running:
		st.Phase = runtime.PhaseRunning
	case qs.Status == qmp.StatusPaused:
		st.Phase = runtime.PhasePaused
	default: // shutdown, internal-error, guest-panicked, …: nothing runs
		st.Phase = runtime.PhaseStopped
	}
	return st, nil
}

// Stop ends the VM (also a paused one); its directory stays.
func (r *Runtime) Stop(ctx context.Context, id model.SandboxID) error {
	unlock := r.lock(id)
	defer unlock()
	dir := r.dir(id)
	if !exists(dir) {
		return fmt.Errorf("stop %s: %w", id, runtime.ErrNotFound)
	}
	pid := vmPid(dir, id.String())
	if pid == 0 {
		return nil
	}
	if err := killVM(ctx, pid, id.String()); err != nil {
		return fmt.Errorf("stop %s: %w", id, err)
	}
	r.closeLog(dir)
	return nil
}

// Delete ends the VM and removes its directory: disk, memory, snapshot.
func (r *Runtime) Delete(ctx context.Context, id model.SandboxID) error {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	unlock := r.lock(id)
	defer unlock()
	if err := r.removeVM(ctx, r.dir(id), id.String()); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	r.ports.forget(id)
	return nil
}

// removeVM kills the VM whose state is in dir (if it runs) and removes
// dir.
// It also removes the VM's cgroup (killing anything left in it) and frees
// its uid.
func (r *Runtime) removeVM(ctx context.Context, dir, name string) error {
	if pid := vmPid(dir, name); pid != 0 {
		if err := killVM(ctx, pid, name); err != nil {
			return err
		}
	}
	r.closeLog(dir)
	if err := r.removeCgroup(ctx, name); err != nil {
		return err
	}
	uid := readUID(dir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if uid != 0 {
		return r.releaseUID(ctx, dir, uid)
	}
	// The directory was gone already: free the id reserved for it.
	return r.releaseOwner(ctx, dir)
}

// List names every sandbox with a directory (running, stopped, suspended
// or a half-made create's leftovers), and every sandbox whose directory is
// gone but whose id reservation is left (a Delete that crashed, or a
// directory removed under a VM, whose cgroup and QEMU may be left):
// deleting it removes those. Only this runtime's VMs are named: another
// runtime's on the host (another state root) share the cgroup parent but
// not the reservations.
func (r *Runtime) List(ctx context.Context) ([]model.SandboxID, error) {
	entries, err := os.ReadDir(r.stateRoot)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var ids []model.SandboxID
	for _, e := range entries {
		id, err := model.ParseSandboxID(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		ids = append(ids, id)
	}
	for _, owner := range r.reservationOwners() {
		if id, err := model.ParseSandboxID(owner); err == nil && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Console ring of a VM.
const (
	consoleDevice    = "console"
	consoleRingBytes = 256 << 10 // a power of two
	consoleTailBytes = 2048
)

// consoleTail is the end of a running (or shut down, -no-shutdown) VM's
// serial console, for errors. Reading the ring consumes it.
func consoleTail(dir string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out string
	err := withQMP(ctx, dir, func(c *qmp.Client) error {
		var all string
		for {
			var chunk string
			if err := c.Execute(ctx, "ringbuf-read", map[string]any{"device": consoleDevice, "size": 64 << 10, "format": "utf8"}, &chunk); err != nil {
				return err
			}
			if chunk == "" {
				break
			}
			all += chunk
			if len(all) > 4*consoleTailBytes {
				all = all[len(all)-consoleTailBytes:]
			}
		}
		out = all
		return nil
	})
	if err != nil {
		return "(console unavailable: QEMU is not running)"
	}
	if len(out) > consoleTailBytes {
		out = out[len(out)-consoleTailBytes:]
	}
	if out == "" {
		return "(empty)"
	}
	return fmt.Sprintf("%q", out)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
