package qemu_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/nldump"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
	"github.com/airlockdev/airlock/internal/runtime/runtimetest"
)

// TestConformance runs the runtime conformance suite on the QEMU runtime
// under TCG, with base snapshots on (most creates restore a clone), at
// most two VMs at once.
func TestConformance(t *testing.T) {
	e := newVMEnv(t)
	start := time.Now()
	tapsBefore := hostTAPs(t)
	t.Cleanup(func() {
		t.Logf("qemu conformance suite took %v", time.Since(start).Round(time.Millisecond))
		// Nothing of the suite's may run on: no VM of its state root
		// (every VM's QEMU holds a uid reserved in .uids until its
		// directory is removed), no TAP device left in the host's
		// namespace.
		if uids, _ := os.ReadDir(filepath.Join(e.root, ".uids")); len(uids) > 1 {
			var names []string
			for _, u := range uids {
				names = append(names, u.Name())
			}
			t.Errorf("VM uids of the suite's state root %s still reserved: %v", e.root, names)
		}
		for name := range hostTAPs(t) {
			if !tapsBefore[name] {
				t.Errorf("TAP device %s left in the host's network namespace", name)
			}
		}
		entries, err := os.ReadDir(e.root)
		if err != nil {
			t.Error(err)
		}
		for _, d := range entries {
			if _, err := model.ParseSandboxID(d.Name()); err == nil {
				t.Errorf("sandbox directory %s left in the state root", d.Name())
			}
		}
	})
	var creates createCounts
	t.Cleanup(func() {
		t.Logf("creates: %d cloned from a base snapshot, %d booted cold", creates.cloned.Load(), creates.booted.Load())
	})
	runtimetest.Run(t, e.conformanceFactory(t, &creates))
}

// createCounts counts the suite's successful creates (without Restore)
// by how they made the VM.
// nicMu serialises creates with a network until one made the base
// snapshot of that shape (warmBases makes those without one; see there).
type createCounts struct {
	cloned, booted atomic.Int64
	nicMu          sync.Mutex
	nicWarm        bool
}

// conformanceFactory returns runtimetest's factory: every call a new
// Runtime value, all on one state root, so that base snapshots (and
// template images) made once serve every case. A second value on the root
// is what a restarted server is.
func (e vmEnv) conformanceFactory(t *testing.T, creates *createCounts) func(t *testing.T) runtime.Runtime {
	e.warmBases(t)
	return func(t *testing.T) runtime.Runtime {
		t.Helper()
		return conformanceRuntime{e.runtime(t, false), t, creates}
	}
}

// warmBases makes the base snapshots of the suite's sandbox shapes (disk
// sizes; with and without a NIC) one after the other before the cases
// run: concurrent first creates of one shape on different Runtime values
// would otherwise each build it (see the report on makeBase).
func (e vmEnv) warmBases(t *testing.T) {
	t.Helper()
	rt := e.runtime(t, false)
	start := time.Now()
	defer func() { t.Logf("base snapshots made in %v", time.Since(start).Round(time.Millisecond)) }()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	sem := make(chan struct{}, 2)
	for _, disk := range []int64{128 << 20, 256 << 20, 64 << 20, 0} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			spec := runtime.Spec{
				ID:        model.NewSandboxID(),
				RootFS:    runtime.RootFS{Lower: e.template},
				Hostname:  "warm",
				Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: 64, DiskBytes: disk},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			err := rt.Create(ctx, spec)
			if derr := rt.Delete(context.Background(), spec.ID); err == nil {
				err = derr
			}
			if err != nil {
				errs <- fmt.Errorf("disk %d: %w", disk, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("warming the base snapshots: %v", err)
	}
}

// conformanceRuntime exposes a Runtime's host artifacts, crash states and
// profile to the conformance suite.
type conformanceRuntime struct {
	*qemu.Runtime
	t       *testing.T
	creates *createCounts
}

// Create checks that every create the suite makes (not a wake) is a
// clone of a base snapshot, as in production: a base that cannot be
// made or restored falls back to a cold boot silently, which would leave
// the clones untested.
func (r conformanceRuntime) Create(ctx context.Context, spec runtime.Spec) error {
	if spec.Network != nil && spec.Restore == nil {
		r.creates.nicMu.Lock()
		if !r.creates.nicWarm {
			defer r.creates.nicMu.Unlock()
			defer func() { r.creates.nicWarm = true }()
		} else {
			r.creates.nicMu.Unlock()
		}
	}
	existed := r.VMPid(spec.ID) != 0
	if err := r.Runtime.Create(ctx, spec); err != nil || spec.Restore != nil || existed {
		return err
	}
	b, err := os.ReadFile(filepath.Join(r.StateDir(spec.ID), "machine.json"))
	var m struct {
		Base string `json:"base"`
	}
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	switch {
	case err != nil:
		r.t.Errorf("machine.json of %s: %v", spec.ID, err)
	case m.Base == "":
		r.creates.booted.Add(1)
		r.t.Errorf("%s booted cold: it was not cloned from a base snapshot", spec.ID)
	default:
		r.creates.cloned.Add(1)
	}
	return nil
}

// Artifacts: a VM has its state directory only: no mounts (its disk is an
// image file QEMU opens), no cgroup, no host upper directory (writes land
// in the disk image) and no agent socket in a directory the guest shares.
func (r conformanceRuntime) Artifacts(id model.SandboxID) runtimetest.Artifacts {
	return runtimetest.Artifacts{StateDir: r.StateDir(id), DiskFiles: []string{r.DiskPath(id)}}
}

// SeccompFiltered: the guest's system calls go to its own kernel.
func (conformanceRuntime) SeccompFiltered() bool { return false }

// UserNamespaced: the boundary is the VM.
func (conformanceRuntime) UserNamespaced() bool { return false }

// MaxParallel: two VMs at once (TCG emulates each vCPU on a host thread;
// CI has two cores).
func (conformanceRuntime) MaxParallel() int { return 2 }

// Timeout: TCG boots and runs guests several times slower than KVM.
func (conformanceRuntime) Timeout() time.Duration { return 3 * time.Minute }

// AgentFromSpec: the agent is the VM's init, in the initramfs of the boot
// inputs; Spec.AgentBinary is not used.
func (conformanceRuntime) AgentFromSpec() bool { return false }

// notApplicable are the suite's cases that do not apply to a VM, and why.
var notApplicable = map[string]string{
	"AgentSocketSymlinkRefused": "the agent's channel is a virtio-serial port whose host socket lives in the sandbox's state directory, which the guest cannot see; no host directory is shared with the guest to plant a symlink in",
	"SeccompFilter":             "the guest's system calls go to its own kernel, under no seccomp filter of the host's (QEMU itself runs under its -sandbox filter)",
	"UserNamespace":             "guest root is root of the guest's own kernel, not a host user in a user namespace: the boundary is the VM",
	"UserNamespacesDistinct":    "sandboxes are VMs with kernels of their own, not user namespaces sharing the host's id space",
	"UserKeyringNotShared":      "each VM has its own kernel and so its own keyrings; there is no host user namespace to enter",
	"ResourceLimitsOnHost":      "QEMU's cgroup (CgroupParent/<id>) holds the guest's RAM plus QEMU's own overhead (HostMemoryBytes), not exactly Resources.MemoryBytes, and pids.max is environment.QEMUHostPids (host threads of QEMU, not guest processes): TestVMConfined checks its limits",
	"PidsLimitCannotBeLifted":   "the guest agent applies Resources.PidsLimit in a pids cgroup of the guest's kernel (ForkBombIsContained), but the workload is root with CAP_SYS_ADMIN in that kernel: it can unmount or remount the cgroup filesystem and lift the limit. What it lifts bounds only its own VM's kernel; its host processes are QEMU's threads, bounded by the VM's host cgroup (HostPids, TestVMConfined)",
	"AgentOutOfWorkloadReach":   "the agent is the VM's init and the workload is root with every capability of the guest's own kernel: it can trace the agent or remove its run directory, but gains nothing beyond its own VM (the boundary is the hypervisor, and the host reaches the agent over virtio-serial, not a socket in the guest's filesystem)",
	"AgentLogOutOfGuestReach":   "the agent is the VM's init and logs into memory (GET /v1/logs) with stdout and stderr on /dev/null, but the workload is root with CAP_SYS_PTRACE in the guest's own kernel, so it can open /proc/1/fd/2 (and write to /dev/null through it, which fills nothing); the console is a ring in QEMU either way",
}

func (conformanceRuntime) NotApplicable(name string) string { return notApplicable[name] }

// CrashStates are what a crash of the server (or of QEMU) leaves of a
// VM.
func (r conformanceRuntime) CrashStates() []runtimetest.CrashState {
	return []runtimetest.CrashState{
		{Name: "MachineFileWithoutQEMU", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A create that wrote machine.json and crashed before QEMU ran.
			dir := r.StateDir(spec.ID)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "machine.json"), []byte(`{"accel":"tcg","cpus":1,"memory_mib":256,"disk":"`+r.DiskPath(spec.ID)+`"}`), 0o600)
		}},
		{Name: "HalfWrittenDisk", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A create that crashed while cloning the disk.
			if err := os.MkdirAll(r.StateDir(spec.ID), 0o700); err != nil {
				return err
			}
			return os.WriteFile(r.DiskPath(spec.ID), []byte("QFI\xfb\x00\x00\x00\x03half"), 0o600)
		}},
		{Name: "QEMUKilledBeforeStart", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A created VM whose QEMU died (SIGKILL) before Start: a
			// create that did not finish, which Create replaces.
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			return r.killQEMU(ctx, spec.ID)
		}},
		{Name: "ThreadOfThisProcessInCgroup", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A running VM whose v1 cgroups also hold a thread of this
			// process, as one the race detector's runtime started while
			// a forking thread sat there: Delete moves it back out
			// instead of failing, and removes the cgroup.
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			return r.strayThreadIn(spec.ID)
		}},
		{Name: "CgroupWithoutDirectory", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A VM whose QEMU died and whose directory is gone, with its
			// cgroup and uid reservation left: List finds it by its
			// reservation, Delete removes it, a create reuses the name.
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			if err := r.killQEMU(ctx, spec.ID); err != nil {
				return err
			}
			return os.RemoveAll(r.StateDir(spec.ID))
		}},
		{Name: "QEMUWithoutDirectory", Make: func(ctx context.Context, spec runtime.Spec) error {
			// A running VM whose directory was removed under it: List
			// finds it by its reservation, and its QEMU is found in its
			// cgroup and ended.
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			if err := r.Start(ctx, spec.ID); err != nil {
				return err
			}
			return os.RemoveAll(r.StateDir(spec.ID))
		}},
		{Name: "QEMUKilledAfterStart", CreateRefuses: true, Make: func(ctx context.Context, spec runtime.Spec) error {
			// A running VM whose QEMU was killed (SIGKILL, the OOM
			// killer): a stopped sandbox, which Create refuses.
			if err := r.Create(ctx, spec); err != nil {
				return err
			}
			if err := r.Start(ctx, spec.ID); err != nil {
				return err
			}
			return r.killQEMU(ctx, spec.ID)
		}},
	}
}

// killQEMU kills the sandbox's QEMU with SIGKILL and waits until it is
// gone.
// strayThreadIn parks a locked thread of this process in the v1 cgroups
// of VM id (those its QEMU is in) until the test ends; the thread ends
// with its goroutine.
func (r conformanceRuntime) strayThreadIn(id model.SandboxID) error {
	pid := r.VMPid(id)
	if pid == 0 {
		return errors.New("no QEMU runs")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	var tasks []string
	for _, l := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 || parts[1] == "" || strings.HasPrefix(parts[1], "name=") || !strings.Contains(parts[2], qemu.CgroupParent) {
			continue
		}
		tasks = append(tasks, filepath.Join("/sys/fs/cgroup", parts[1], parts[2], "tasks"))
	}
	if len(tasks) == 0 {
		r.t.Skip("the VM has no v1 cgroup")
	}
	release := make(chan struct{})
	r.t.Cleanup(func() { close(release) })
	joined := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tid := strconv.Itoa(unix.Gettid())
		for _, f := range tasks {
			if err := os.WriteFile(f, []byte(tid), 0o644); err != nil {
				joined <- err
				return
			}
		}
		joined <- nil
		<-release
	}()
	return <-joined
}

func (r conformanceRuntime) killQEMU(ctx context.Context, id model.SandboxID) error {
	pid := r.VMPid(id)
	if pid == 0 {
		return errors.New("no QEMU runs")
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		return err
	}
	for r.VMPid(id) != 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// hostTAPs names the TUN/TAP devices in the host's network namespace.
func hostTAPs(t *testing.T) map[string]bool {
	t.Helper()
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	taps := map[string]bool{}
	for _, l := range links {
		if l.Type() == "tuntap" {
			taps[l.Attrs().Name] = true
		}
	}
	return taps
}
