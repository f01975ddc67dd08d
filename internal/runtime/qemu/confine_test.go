package qemu_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
)

// procStatus reads the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	st := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	return st
}

// TestVMConfined plays a guest that broke out into its QEMU: the process
// must hold no host privilege (a uid and gid of its own, not root; no
// capability; QEMU's seccomp filter), sit in a cgroup of its own with the
// VM's memory, CPU and pids limits, and hold nothing shared with other VMs
// that it could write (a base snapshot's RAM is a sealed memfd; backing
// files are read-only), nor be able to open the shared files by path.
func TestVMConfined(t *testing.T) {
	e := newVMEnv(t)
	withBase := e.runtime(t, false) // a create clones a base snapshot
	cold := e.runtime(t, true)      // a create boots
	// Registered first, checked last: every VM's uid is free again.
	t.Cleanup(func() {
		if uids, _ := os.ReadDir(filepath.Join(e.root, ".uids")); len(uids) != 1 {
			t.Errorf("uid reservations left in the state root: %d files", len(uids)-1)
		}
	})
	host, err := cgroups.Detect()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	specs := []struct {
		name   string
		cpus   int
		cloned bool
	}{{"clone", 1, true}, {"booted-2cpus", 2, false}, {"clone-again", 1, true}}
	uids := map[string]bool{}
	top := t
	for _, sc := range specs {
		t.Run(sc.name, func(t *testing.T) {
			rt := withBase
			if !sc.cloned {
				rt = cold
			}
			spec := e.spec("confined", nil)
			spec.Resources.CPUs = sc.cpus
			spec.Resources.PidsLimit = 40
			if err := rt.Create(ctx, spec); err != nil {
				t.Fatal(err)
			}
			// Deleted at the end of the test: the VMs run side by side.
			top.Cleanup(func() {
				t := top
				if err := rt.Delete(ctxFor(t), spec.ID); err != nil {
					t.Errorf("delete: %v", err)
				}
				assertNoVM(t, rt, spec.ID)
				cg, _ := cgroups.Path(qemu.CgroupParent).Join(spec.ID.String())
				if ok, err := host.Exists(cg); ok || err != nil {
					t.Errorf("cgroup %s left after delete: %v", cg, err)
				}
			})
			if err := rt.Start(ctx, spec.ID); err != nil {
				t.Fatal(err)
			}
			if got := rt.CreatedFromSnapshot(spec.ID); got != sc.cloned {
				t.Fatalf("created from a base snapshot: %v, want %v", got, sc.cloned)
			}
			pid := rt.VMPid(spec.ID)
			if pid == 0 {
				t.Fatal("no QEMU runs")
			}
			st := procStatus(t, pid)
			// Uid: real, effective, saved, filesystem.
			uid := strings.Fields(st["Uid"])
			if len(uid) != 4 || uid[0] == "0" || uid[0] != uid[1] || uid[0] != uid[2] || uid[0] != uid[3] {
				t.Errorf("QEMU runs as Uid %q, want one non-root uid", st["Uid"])
			}
			if gid := strings.Fields(st["Gid"]); len(gid) != 4 || gid[0] == "0" || gid[0] != gid[3] {
				t.Errorf("QEMU runs as Gid %q, want one non-root gid", st["Gid"])
			}
			if st["Groups"] != "" {
				t.Errorf("QEMU has supplementary groups %q", st["Groups"])
			}
			for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
				if st[c] != "0000000000000000" {
					t.Errorf("QEMU's %s = %s, want none", c, st[c])
				}
			}
			if st["Seccomp"] != "2" {
				t.Errorf("QEMU's Seccomp = %q, want 2 (its -sandbox filter)", st["Seccomp"])
			}
			if uids[uid[0]] {
				t.Errorf("two VMs share uid %s", uid[0])
			}
			uids[uid[0]] = true
			if n, _ := strconv.Atoi(uid[0]); n < qemu.DefaultVMIDBase {
				t.Errorf("uid %d is not from the VM id pool (from %d)", n, qemu.DefaultVMIDBase)
			}

			// Its cgroup, in every controller that limits it.
			want := cgroups.Path(qemu.CgroupParent + "/" + spec.ID.String())
			cgfile, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []string{"memory", "cpu", "pids"} {
				dir, err := host.ControllerDir(c, want)
				if err != nil {
					t.Fatal(err)
				}
				procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				if err != nil {
					t.Errorf("%s cgroup of the VM: %v (QEMU's /proc/PID/cgroup: %s)", c, err, cgfile)
					continue
				}
				if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(pid)) {
					t.Errorf("QEMU %d is not in its %s cgroup %s (it holds %q; QEMU's /proc/PID/cgroup: %s)", pid, c, dir, procs, cgfile)
				}
			}
			lim, err := host.Limits(want)
			if err != nil {
				t.Fatal(err)
			}
			if w := qemu.HostMemoryBytes(spec.Resources.MemoryBytes, qemu.AccelTCG); lim.MemoryBytes != w {
				t.Errorf("memory limit of the VM's cgroup = %d, want %d (RAM + overhead)", lim.MemoryBytes, w)
			}
			if w := int64(environment.QEMUHostPids); lim.PidsMax != w {
				t.Errorf("pids limit of the VM's cgroup = %d, want %d", lim.PidsMax, w)
			}
			if lim.CPUPeriodMicros <= 0 || lim.CPUQuotaMicros != int64(sc.cpus)*lim.CPUPeriodMicros {
				t.Errorf("cpu quota/period of the VM's cgroup = %d/%d, want %d CPUs", lim.CPUQuotaMicros, lim.CPUPeriodMicros, sc.cpus)
			}
			if dir, err := host.ControllerDir("memory", want); err == nil {
				for _, f := range []string{"memory.usage_in_bytes", "memory.current", "memory.max_usage_in_bytes", "memory.peak"} {
					if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
						t.Logf("%s of the VM's cgroup: %s MiB (limit %d MiB)", f, mib(b), lim.MemoryBytes>>20)
					}
				}
			}
			t.Logf("QEMU runs %s threads (pids.max %d)", st["Threads"], lim.PidsMax)
			if threads, _ := strconv.Atoi(st["Threads"]); threads <= 0 || int64(threads) > lim.PidsMax/2 {
				t.Errorf("QEMU runs %d threads: its pids limit %d leaves too little room", threads, lim.PidsMax)
			}

			// Every file QEMU holds writable is the VM's own (in its
			// directory) or a sealed memfd, a socket, a pipe or a device.
			dir := rt.StateDir(spec.ID)
			fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, fd := range fds {
				p := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
				target, err := os.Readlink(p)
				if err != nil {
					continue
				}
				info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
				if err != nil {
					continue
				}
				var flags int64
				for _, l := range strings.Split(string(info), "\n") {
					if v, ok := strings.CutPrefix(l, "flags:"); ok {
						flags, _ = strconv.ParseInt(strings.TrimSpace(v), 8, 64)
					}
				}
				if flags&unix.O_ACCMODE == unix.O_RDONLY {
					continue
				}
				switch {
				case strings.HasPrefix(target, dir+"/"),
					strings.HasPrefix(target, "socket:"), strings.HasPrefix(target, "pipe:"),
					strings.HasPrefix(target, "anon_inode:"), strings.HasPrefix(target, "/dev/"):
				case strings.HasPrefix(target, "/memfd:"):
					f, err := os.Open(p)
					if err != nil {
						t.Errorf("open QEMU's %s (%s): %v", fd.Name(), target, err)
						continue
					}
					seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
					f.Close()
					if err != nil || seals&unix.F_SEAL_WRITE == 0 {
						t.Errorf("QEMU holds the memfd %s writable and not sealed against writes (seals %#x, %v)", target, seals, err)
					}
				default:
					t.Errorf("QEMU holds %s (not its VM's) open for writing (flags %o)", target, flags)
				}
			}

			// As its uid, the shared files (template images, base
			// snapshots) are out of reach by path.
			shared, _ := filepath.Glob(filepath.Join(e.root, ".images", "*"))
			bases, _ := filepath.Glob(filepath.Join(e.root, ".base", "*", "*"))
			shared = append(shared, bases...)
			if len(shared) == 0 {
				t.Fatal("no shared file in the state root")
			}
			n, _ := strconv.Atoi(uid[0])
			for _, f := range shared {
				cmd := exec.Command("/bin/sh", "-c", `exec 3<"$1"`, "sh", f)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(n), Gid: uint32(n), Groups: []uint32{}}}
				if out, err := cmd.CombinedOutput(); err == nil {
					t.Errorf("the VM's uid %d can open %s: %s", n, f, out)
				}
			}
		})
	}
}

func mib(b []byte) string {
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return strconv.FormatInt(n>>20, 10)
}

// TestQEMULogBounded: whatever QEMU writes to its stderr, qemu.log keeps
// its last 64 KiB and the rest is dropped (QEMU never blocks on it). The
// "QEMU" here writes 2 MiB to stderr before it becomes QEMU; then the
// guest floods its console and kernel log.
func TestQEMULogBounded(t *testing.T) {
	e := newVMEnv(t)
	real, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	// The VM's uid executes it: the test's own directories (t.TempDir
	// makes them 0700) must let it through; the temp root (/tmp, 1777)
	// already does and is left alone.
	bin := t.TempDir()
	for d := bin; filepath.Dir(d) != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
		if d == "/" || !strings.HasPrefix(d, filepath.Clean(os.TempDir())+"/") {
			t.Fatalf("%s is not below %s", bin, os.TempDir())
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(bin, "qemu-flood")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ni=0\nwhile [ $i -lt 2048 ]; do printf '%01024d\\n' $i >&2 || true; i=$((i+1)); done\nexec "+real+` "$@"`+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := qemu.New(qemu.Config{Binary: script, StateRoot: e.root, Boot: e.boot, Accel: qemu.AccelTCG, NoBaseSnapshots: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	spec := e.spec("flood", nil)
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Delete(ctxFor(t), spec.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
		assertNoVM(t, rt, spec.ID)
	})
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.State(ctx, spec.ID); err != nil { // drains the pipe
		t.Fatal(err)
	}
	c := client(t, rt, spec.ID)
	if got := sh(t, c, "echo alive"); got != "alive" {
		t.Fatalf("the VM after the flood: %q", got)
	}
	// The guest floods its console and kernel log (the serial console is
	// a ring in QEMU; nothing of it reaches qemu.log).
	sh(t, c, `i=0; while [ $i -lt 2000 ]; do echo "console flood $i ................................................................" > /dev/console; echo "<3>kmsg flood $i" > /dev/kmsg; i=$((i+1)); done`)
	if _, err := rt.State(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(rt.StateDir(spec.ID), "qemu.log"))
	if err != nil {
		t.Fatalf("qemu.log: %v", err)
	}
	t.Logf("qemu.log: %d bytes after 2 MiB on QEMU's stderr and a console flood", fi.Size())
	if fi.Size() == 0 || fi.Size() > 64<<10 {
		t.Errorf("qemu.log holds %d bytes, want some and at most 64 KiB", fi.Size())
	}
}

// TestListNamesOnlyItsOwnVMs: runtimes of two state roots on one host (two
// servers, a server and a benchmark, tests side by side) share the cgroup
// parent of VMs; one's List must not name the other's running VM, which a
// reconciler would then delete (it did: List named every cgroup without a
// directory of its own, and a test's VM was killed by another's cleanup).
func TestListNamesOnlyItsOwnVMs(t *testing.T) {
	e := newVMEnv(t)
	mine := e.runtime(t, true)
	other, err := qemu.New(qemu.Config{StateRoot: t.TempDir(), Boot: e.boot, Accel: qemu.AccelTCG, NoBaseSnapshots: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	spec := e.spec("mine", nil)
	if err := mine.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mine.Delete(ctxFor(t), spec.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
		assertNoVM(t, mine, spec.ID)
	})
	if err := mine.Start(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if ids, err := other.List(ctx); err != nil || slices.Contains(ids, spec.ID) {
		t.Fatalf("the other runtime lists %v (%v): it names this runtime's VM %s", ids, err, spec.ID)
	}
	if ids, err := mine.List(ctx); err != nil || !slices.Contains(ids, spec.ID) {
		t.Fatalf("List = %v, %v: want %s", ids, err, spec.ID)
	}
	if mine.VMPid(spec.ID) == 0 {
		t.Fatal("the VM is not running")
	}
}
