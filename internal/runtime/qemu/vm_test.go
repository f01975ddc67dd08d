package qemu_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/guestboot"
	"github.com/airlockdev/airlock/internal/guestboot/guestboottest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
)

// vmEnv is what the VM tests share: boot inputs with this tree's agent
// as init, and a busybox template.
type vmEnv struct {
	boot     qemu.Boot
	template string
	root     string
}

func newVMEnv(t *testing.T) vmEnv {
	t.Helper()
	airtest.RequireRoot(t)
	requireOrFail(t, "qemu-system-x86_64", "qemu-img", "mkfs.ext4")
	agent := airtest.BuildAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	art, err := guestboot.Build(ctx, guestboot.Options{Dir: guestboottest.Cache(t), Agent: agent, Uncompressed: true})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("boot inputs: %v", err)
		}
		t.Skipf("boot inputs unavailable: %v", err)
	}
	khz, err := guestboot.HostTSCkHz()
	if err != nil {
		t.Fatal(err)
	}
	tpl := airtest.BusyboxRootfs(t)
	return vmEnv{
		boot:     qemu.Boot{Kernel: art.KernelPath, Initrd: art.InitrdPath, CommandLine: guestboot.KernelCmdline(khz)},
		template: tpl,
		root:     t.TempDir(),
	}
}

func requireOrFail(t *testing.T, bins ...string) {
	t.Helper()
	airtest.SkipShort(t, "QEMU")
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI must run the VM tests: %s not installed", b)
			}
			t.Skipf("%s not installed", b)
		}
	}
}

func (e vmEnv) runtime(t *testing.T, noBase bool) *qemu.Runtime {
	t.Helper()
	rt, err := qemu.New(qemu.Config{StateRoot: e.root, Boot: e.boot, Accel: qemu.AccelTCG, NoBaseSnapshots: noBase, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// testLogger logs the runtime's warnings into the test's log (a base
// snapshot that could not be made says why there), everything with -v.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// tLogWriter writes into a test's log.
type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (e vmEnv) spec(hostname string, env model.Env) runtime.Spec {
	return runtime.Spec{
		ID:        model.NewSandboxID(),
		RootFS:    runtime.RootFS{Lower: e.template},
		Hostname:  hostname,
		Env:       env,
		Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, DiskBytes: 256 << 20},
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T, rt *qemu.Runtime, id model.SandboxID) *agentclient.Client {
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, testLogger(t))
	t.Cleanup(func() { c.Close() })
	return c
}

func sh(t *testing.T, c *agentclient.Client, script string) string {
	t.Helper()
	res, err := c.Run(ctxFor(t), agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("run %q: exit %d: %s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// assertNoVM checks that no QEMU of the test's state root runs and that
// the sandbox's directory is gone.
func assertNoVM(t *testing.T, rt *qemu.Runtime, id model.SandboxID) {
	t.Helper()
	if _, err := os.Stat(rt.StateDir(id)); !os.IsNotExist(err) {
		t.Errorf("state dir of %s left: %v", id, err)
	}
	out, _ := exec.Command("pgrep", "-f", "guest="+id.String()).Output()
	if len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("a QEMU of %s still runs: %s", id, out)
	}
}

func TestVMLifecycle(t *testing.T) {
	e := newVMEnv(t)
	rt := e.runtime(t, true)
	ctx := ctxFor(t)
	spec := e.spec("vm-one", model.Env{"GREETING": "hello from the host"})
	t.Cleanup(func() {
		if err := rt.Delete(context.Background(), spec.ID); err != nil {
			t.Error(err)
		}
		assertNoVM(t, rt, spec.ID)
	})
	start := time.Now()
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.State(ctx, spec.ID); err != nil || st.Phase != runtime.PhaseCreated {
		t.Fatalf("State after Create = %+v, %v; want created", st, err)
	}
	created := time.Since(start)
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("cold create: Create %v, Start (boot and guest configuration) %v", created.Round(time.Millisecond), (time.Since(start) - created).Round(time.Millisecond))
	c := client(t, rt, spec.ID)
	out := sh(t, c, `uname -r; hostname; echo "$GREETING"`)
	t.Logf("cold boot → first output: %v", time.Since(start).Round(time.Millisecond))
	lines := strings.Split(out, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "6.1.") || lines[1] != "vm-one" || lines[2] != "hello from the host" {
		t.Fatalf("guest said %q; want the Debian 6.1 kernel release, vm-one and the greeting", out)
	}
	// A guest that writes its console without end fills nothing on the
	// host: the console is a ring in QEMU's memory.
	logBytes := func() int64 {
		var n int64
		entries, _ := os.ReadDir(rt.StateDir(spec.ID))
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && e.Name() != "memory" && e.Name() != "disk" && !strings.HasPrefix(e.Name(), "layer-") {
				n += fi.Size()
			}
		}
		return n
	}
	before := logBytes()
	sh(t, c, `i=0; while [ $i -lt 64 ]; do head -c 8192 /dev/zero | tr '\0' x > /dev/console; i=$((i+1)); done`)
	if grown := logBytes() - before; grown > 64<<10 {
		t.Fatalf("512 KiB written to the guest's console grew the host's files by %d bytes", grown)
	}
	// A file holding the HTTP/2 client preface (any Go binary with
	// net/http does) crosses the virtio-serial transport untouched.
	payload := bytes.Repeat([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n-payload-"), 4096)
	if _, err := c.WriteFile(ctx, "/tmp/preface", 0o644, bytes.NewReader(payload)); err != nil {
		t.Fatalf("upload a file holding the HTTP/2 preface: %v", err)
	}
	if got := sh(t, c, "sha256sum /tmp/preface | cut -d' ' -f1"); got != fmt.Sprintf("%x", sha256.Sum256(payload)) {
		t.Fatalf("the uploaded file's sha256 in the guest is %s, want %x", got, sha256.Sum256(payload))
	}
	// A process whose state lives only in guest memory (/run is a tmpfs):
	// it must keep counting across pause and suspend.
	sh(t, c, `(i=0; while :; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done) >/dev/null 2>&1 &`)
	time.Sleep(500 * time.Millisecond)

	if err := rt.Pause(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.State(ctx, spec.ID); st.Phase != runtime.PhasePaused {
		t.Fatalf("State after Pause = %s", st.Phase)
	}
	if err := rt.Resume(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	counted := sh(t, c, "cat /run/counter")

	c.Close()
	t0 := time.Now()
	snap, err := rt.Suspend(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("suspend: %v (%d bytes)", time.Since(t0).Round(time.Millisecond), snap.SizeBytes)
	if _, err := rt.State(ctx, spec.ID); err == nil {
		t.Fatal("State of a suspended sandbox succeeded")
	}
	spec.Restore = &snap
	t0 = time.Now()
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	c2 := client(t, rt, spec.ID)
	after := sh(t, c2, "sleep 0.3; cat /run/counter")
	t.Logf("wake → first output: %v", time.Since(t0).Round(time.Millisecond))
	if after <= counted && len(after) <= len(counted) {
		t.Fatalf("counter %s after wake, %s before: the process did not survive the suspend", after, counted)
	}
	if err := rt.ForgetSnapshot(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rt.StateDir(spec.ID), "snapshot")); !os.IsNotExist(err) {
		t.Fatalf("snapshot kept after ForgetSnapshot: %v", err)
	}
	// Suspend again (now a full stream: the woken VM's RAM is private).
	c2.Close()
	snap, err = rt.Suspend(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	spec.Restore = &snap
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, client(t, rt, spec.ID), "hostname"); got != "vm-one" {
		t.Fatalf("hostname after second wake = %q", got)
	}
	if err := rt.ForgetSnapshot(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.State(ctx, spec.ID); err != nil || st.Phase != runtime.PhaseStopped {
		t.Fatalf("State after Stop = %+v, %v", st, err)
	}
}

func TestBaseSnapshotClonesDiffer(t *testing.T) {
	e := newVMEnv(t)
	rt := e.runtime(t, false)
	ctx := ctxFor(t)
	type clone struct {
		spec runtime.Spec
		out  string
	}
	var clones []clone
	for i, name := range []string{"clone-a", "clone-b"} {
		spec := e.spec(name, model.Env{"WHO": name})
		t.Cleanup(func() {
			if err := rt.Delete(context.Background(), spec.ID); err != nil {
				t.Error(err)
			}
			assertNoVM(t, rt, spec.ID)
		})
		t0 := time.Now()
		if err := rt.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(ctx, spec.ID); err != nil {
			t.Fatal(err)
		}
		out := sh(t, client(t, rt, spec.ID), `hostname; echo "$WHO"; head -c 16 /dev/urandom | od -A n -t x1 | tr -d ' \n'; echo; cat /proc/sys/kernel/random/uuid`)
		t.Logf("create %d (%s) → first output: %v", i, map[bool]string{true: "makes the base snapshot", false: "restores it"}[i == 0], time.Since(t0).Round(time.Millisecond))
		lines := strings.Split(out, "\n")
		if len(lines) != 4 || lines[0] != name || lines[1] != name {
			t.Fatalf("clone %s said %q", name, out)
		}
		if b, err := os.ReadFile(filepath.Join(rt.StateDir(spec.ID), "machine.json")); err != nil || !strings.Contains(string(b), `"base"`) {
			t.Fatalf("clone %s was not made from the base snapshot: %s %v", name, b, err)
		}
		clones = append(clones, clone{spec, out})
	}
	a := strings.Split(clones[0].out, "\n")
	b := strings.Split(clones[1].out, "\n")
	if a[2] == b[2] || a[3] == b[3] {
		t.Fatalf("two clones of one base snapshot share random state:\n%s\n%s", clones[0].out, clones[1].out)
	}
}
