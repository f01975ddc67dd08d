package runtimetest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// suspender returns rt's suspend method, skipping the test when it claims
// neither CapCheckpoint nor CapFilesystemSnapshot.
func suspender(t *testing.T, rt runtime.Runtime) runtime.Suspender {
	t.Helper()
	caps := rt.Info().Capabilities
	if !caps.Has(runtime.CapCheckpoint) && !caps.Has(runtime.CapFilesystemSnapshot) {
		t.Skipf("%s claims neither %s nor %s", rt.Info().Name, runtime.CapCheckpoint, runtime.CapFilesystemSnapshot)
	}
	sp, err := runtime.AsSuspender(rt)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// checkSuspenderClaim is CapabilitiesConsistent's part for the snapshot
// capabilities: a runtime claiming one implements runtime.Suspender, one
// claiming neither is refused by AsSuspender, and the kind it would write
// is the one its capabilities say.
func checkSuspenderClaim(t *testing.T, rt runtime.Runtime) {
	t.Helper()
	caps := rt.Info().Capabilities
	claims := caps.Has(runtime.CapCheckpoint) || caps.Has(runtime.CapFilesystemSnapshot)
	_, implements := rt.(runtime.Suspender)
	sp, err := runtime.AsSuspender(rt)
	switch {
	case claims && !implements:
		t.Errorf("%T claims a snapshot capability without implementing runtime.Suspender", rt)
	case claims && (err != nil || sp == nil):
		t.Errorf("AsSuspender of a runtime claiming a snapshot capability = %v, %v", sp, err)
	case !claims && !errors.Is(err, runtime.ErrNotSupported):
		t.Errorf("AsSuspender of a runtime claiming no snapshot capability = %v, want ErrNotSupported", err)
	}
	if kind := runtime.SnapshotKindOf(caps); claims != (kind != "") {
		t.Errorf("SnapshotKindOf(%v) = %q", caps, kind)
	}
}

// counterRunning starts counterScript in the sandbox and waits until it
// counts; it returns the process's ID.
func counterRunning(t *testing.T, c *agentclient.Client) string {
	t.Helper()
	id := model.NewProcessID().String()
	if _, err := c.Start(ctxFor(t), agentproto.StartRequest{ID: id, Args: []string{"sh", "-c", counterScript}}); err != nil {
		t.Fatalf("start the counter: %v", err)
	}
	waitFor(t, 10*time.Second, "the counter to count", func() (bool, string) {
		out, _ := tryRun(t, c, "cat", "/counter")
		return len(strings.TrimSpace(string(out.Stdout))) > 0, string(out.Stderr)
	})
	return id
}

// assertSuspended checks that a suspended sandbox holds nothing a running
// one does (no container for State, its init process gone, no mount below
// its state directory, no loop device, no cgroup) but is still there: List
// names it and its state directory exists.
func (s *suite) assertSuspended(t *testing.T, rt runtime.Runtime, id model.SandboxID, initPid int) {
	t.Helper()
	ctx := ctxFor(t)
	if st, err := rt.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State of a suspended sandbox = %+v, %v; want ErrNotFound", st, err)
	}
	if ids, err := rt.List(ctx); err != nil || !slices.Contains(ids, id) {
		t.Errorf("List = %v, %v; want it to name the suspended sandbox", ids, err)
	}
	if initPid > 0 {
		// Dead; a zombie until whoever adopted it reaps it.
		if procfs.Alive(initPid) {
			t.Errorf("the sandbox's init process %d is alive after Suspend", initPid)
		}
	}
	a := inspector(t, rt).Artifacts(id)
	if fi, err := os.Stat(a.StateDir); err != nil || !fi.IsDir() {
		t.Errorf("state dir %s after Suspend: %v (the snapshot lives there)", a.StateDir, err)
	}
	if under, err := rootfs.MountsUnder(a.StateDir); err != nil || len(under) > 0 {
		t.Errorf("mounts left under %s after Suspend: %q (%v)", a.StateDir, under, err)
	}
	assertNoLoopDevices(t, a.StateDir)
	if a.Cgroup != "" {
		if dirs, err := s.cgroups.Existing(a.Cgroup); err != nil || len(dirs) > 0 {
			t.Errorf("cgroup %s left in %q after Suspend (%v)", a.Cgroup, dirs, err)
		}
	}
}

// testSuspendWake checks Suspend and Create with Spec.Restore on a runtime
// claiming CapCheckpoint or CapFilesystemSnapshot: the snapshot has the
// kind the capabilities say; a suspended sandbox holds no process, mount
// or cgroup but keeps its state directory; Suspend is idempotent (also
// for a new runtime value, as after a server restart); Create without
// Restore refuses it, and a restore with the wrong format or location is
// refused; a restore that fails keeps the snapshot; the woken sandbox's
// agent answers and a file written before is there. With CapCheckpoint a
// process continues counting from where it was; with a filesystem
// snapshot only, it is gone (processes do not survive) and its last count
// is on disk. Delete then leaves nothing.
func testSuspendWake(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	sp := suspender(t, rt)
	ctx := ctxFor(t)
	memory := rt.Info().Capabilities.Has(runtime.CapCheckpoint)
	if _, err := sp.Suspend(ctx, model.NewSandboxID()); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Suspend of an unknown sandbox = %v, want ErrNotFound", err)
	}

	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	sh(t, c, "echo before-suspend > /kept.txt && rm /"+markerFile)
	counter := counterRunning(t, c)
	// Let it count well away from 0, so a count restarted after the wake
	// would show.
	time.Sleep(time.Second)
	before := readCounter(t, c)
	st := mustState(t, rt, spec.ID, runtime.PhaseRunning)
	c.Close()

	start := time.Now()
	snap, err := sp.Suspend(ctx, spec.ID)
	if err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	t.Logf("Suspend took %v; snapshot %+v", time.Since(start), snap)
	if want := runtime.SnapshotKindOf(rt.Info().Capabilities); snap.Kind != want {
		t.Errorf("snapshot kind = %q, want %q", snap.Kind, want)
	}
	if snap.Format == "" || snap.Location == "" || snap.CreatedAt.IsZero() || snap.SizeBytes <= 0 {
		t.Errorf("snapshot = %+v: want a format, a location, a creation time and a size", snap)
	}
	s.assertSuspended(t, rt, spec.ID, st.Pid)

	for name, r := range map[string]runtime.Runtime{"again": rt, "after a restart": newRuntime(t)} {
		again, err := suspender(t, r).Suspend(ctx, spec.ID)
		if err != nil || again != snap {
			t.Errorf("Suspend of a suspended sandbox (%s) = %+v, %v; want %+v", name, again, err, snap)
		}
	}
	if err := rt.Start(ctx, spec.ID); err == nil {
		t.Error("Start of a suspended sandbox succeeded")
	}
	if err := rt.Create(ctx, spec); err == nil {
		t.Fatal("Create without Restore over a suspended sandbox succeeded")
	} else {
		t.Logf("Create without Restore: %v", err)
	}
	for name, bad := range map[string]runtime.Snapshot{
		"another format":   {Kind: snap.Kind, Format: snap.Format + "-other", Location: snap.Location},
		"another location": {Kind: snap.Kind, Format: snap.Format, Location: filepath.Join(filepath.Dir(snap.Location), model.NewSandboxID().String())},
	} {
		wrong := spec
		wrong.Restore = &bad
		if err := rt.Create(ctx, wrong); err == nil {
			t.Fatalf("Create restoring a snapshot of %s succeeded", name)
		}
	}
	if agentFromSpec(rt) {
		// (A runtime that boots its agent from its own image ignores
		// AgentBinary: it has no restore to break this way.)
		broken := spec
		broken.Restore = &snap
		broken.AgentBinary = filepath.Join(t.TempDir(), "no-such-agent")
		if err := rt.Create(ctx, broken); err == nil {
			t.Fatal("Create restoring with a missing agent binary succeeded")
		}
	}
	s.assertSuspended(t, rt, spec.ID, 0)
	if again, err := sp.Suspend(ctx, spec.ID); err != nil || again != snap {
		t.Errorf("Suspend after a failed restore = %+v, %v; want the snapshot kept, %+v", again, err, snap)
	}

	wake := spec
	wake.Restore = &snap
	start = time.Now()
	if err := rt.Create(ctx, wake); err != nil {
		t.Fatalf("Create with Restore: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start after restore: %v", err)
	}
	c = client(t, rt, spec.ID)
	if got := sh(t, c, "cat /kept.txt; test -e /"+markerFile+" || echo removed"); got != "before-suspend\nremoved\n" {
		t.Fatalf("files after wake = %q, want the file written and the removal kept", got)
	}
	t.Logf("Create(Restore) + Start + first command took %v", time.Since(start))
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	if err := rt.Create(ctx, wake); err != nil {
		t.Errorf("Create with Restore of the woken sandbox (a retry) = %v, want nil", err)
	}

	after := readCounter(t, c)
	ps, perr := c.Status(ctx, counter)
	if memory {
		if after < before {
			t.Fatalf("the counter went back from %d to %d: the process did not survive", before, after)
		}
		if perr != nil || !ps.Running {
			t.Fatalf("the counter after wake: %+v, %v; want it running", ps, perr)
		}
		waitFor(t, 10*time.Second, "the counter to continue", func() (bool, string) {
			n := readCounter(t, c)
			return n > after, strconv.Itoa(n)
		})
		t.Logf("the counter continued: %d before suspend, %d after wake", before, after)
	} else {
		// A filesystem snapshot: the processes are gone, their writes
		// are not.
		if perr == nil && ps.Running {
			t.Fatalf("the counter runs after a filesystem-only wake: %+v", ps)
		}
		time.Sleep(300 * time.Millisecond)
		if again := readCounter(t, c); again != after || after < before {
			t.Fatalf("the counter is %d before suspend, %d and %d after wake: want it stopped at its last count", before, after, again)
		}
		t.Logf("filesystem snapshot: the counter is not running (stopped at %d)", after)
	}
	// Suspend and wake once more: a woken sandbox is an ordinary one.
	c.Close()
	snap2, err := sp.Suspend(ctx, spec.ID)
	if err != nil {
		t.Fatalf("second Suspend: %v", err)
	}
	s.assertSuspended(t, rt, spec.ID, 0)
	wake.Restore = &snap2
	if err := rt.Create(ctx, wake); err != nil {
		t.Fatalf("second Create with Restore: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("second Start after restore: %v", err)
	}
	if got := sh(t, client(t, rt, spec.ID), "cat /kept.txt"); got != "before-suspend\n" {
		t.Fatalf("after the second wake: %q", got)
	}
}

// testSuspendPaused checks that a paused sandbox can be suspended and
// woken, and that Delete removes a suspended sandbox without a trace.
func testSuspendPaused(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	sp := suspender(t, rt)
	p := pauser(t, rt)
	ctx := ctxFor(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	sh(t, c, "echo paused-then-suspended > /kept.txt")
	counter := counterRunning(t, c)
	c.Close()
	if err := p.Pause(ctx, spec.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	st := mustState(t, rt, spec.ID, runtime.PhasePaused)
	snap, err := sp.Suspend(ctx, spec.ID)
	if err != nil {
		t.Fatalf("Suspend of a paused sandbox: %v", err)
	}
	s.assertSuspended(t, rt, spec.ID, st.Pid)
	wake := spec
	wake.Restore = &snap
	if err := rt.Create(ctx, wake); err != nil {
		t.Fatalf("Create with Restore: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	c = client(t, rt, spec.ID)
	if got := sh(t, c, "cat /kept.txt"); got != "paused-then-suspended\n" {
		t.Fatalf("file after wake = %q", got)
	}
	ps, err := c.Status(ctx, counter)
	if running := err == nil && ps.Running; running != rt.Info().Capabilities.Has(runtime.CapCheckpoint) {
		t.Errorf("the counter after wake: %+v, %v (memory snapshot: %v)", ps, err, rt.Info().Capabilities.Has(runtime.CapCheckpoint))
	}
	c.Close()

	// Suspended again, Delete removes the snapshot with the rest.
	if _, err := sp.Suspend(ctx, spec.ID); err != nil {
		t.Fatalf("second Suspend: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if conn, err := rt.DialAgent(dctx, spec.ID); err == nil {
		conn.Close()
		t.Error("DialAgent of a suspended sandbox succeeded")
	}
	s.deleteAndCheck(t, rt, spec.ID)
	if _, err := sp.Suspend(ctx, spec.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Suspend after Delete = %v, want ErrNotFound", err)
	}
}

// testSuspendWakeNetwork checks that a sandbox in a prepared network
// reaches the host end of its link before a suspend and after its wake
// into the same network namespace (runsc restores its own network stack
// there, with the flags it was created with); that the suspended sandbox
// holds no mount (the network files' tmpfs included); and that the woken
// one has its resolv.conf and CA files again.
func testSuspendWakeNetwork(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	sp := suspender(t, rt)
	if !rt.Info().Capabilities.Has(runtime.CapNetwork) {
		t.Skipf("%s does not claim %s", rt.Info().Name, runtime.CapNetwork)
	}
	spec := s.spec(defaultResources, nil)
	ctx := ctxFor(t)
	att := attachNetwork(t, &spec)
	gw := att.HostAddr.Addr()
	ln := hostEndListener(t, att)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			c.Write([]byte("pong\n"))
			c.Close()
		}
	}()
	ping := func(c *agentclient.Client, when string) {
		t.Helper()
		cmd := "nc -w 10 " + gw.String() + " " + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + " </dev/null"
		if out := sh(t, c, cmd); strings.TrimSpace(out) != "pong" {
			t.Fatalf("%s: the guest received %q from the host end", when, out)
		}
	}

	netFiles := "cat /etc/resolv.conf /etc/airlock/ca.crt; tail -c " + strconv.Itoa(len(testCACert)) + " /etc/ssl/certs/ca-certificates.crt"
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	ping(c, "before suspend")
	files := sh(t, c, netFiles)
	if !strings.Contains(files, "nameserver "+gw.String()+"\n") || strings.Count(files, testCACert) != 2 {
		t.Fatalf("the network files before suspend: %q", files)
	}
	c.Close()
	snap, err := sp.Suspend(ctx, spec.ID)
	if err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	s.assertSuspended(t, rt, spec.ID, 0)
	wake := spec
	wake.Restore = &snap
	if err := rt.Create(ctx, wake); err != nil {
		t.Fatalf("Create with Restore: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	c = client(t, rt, spec.ID)
	if addrs := sh(t, c, "ip -4 addr show dev eth0"); !strings.Contains(addrs, "inet "+att.GuestAddr.String()) {
		t.Errorf("eth0 after wake:\n%s\nwant %s", addrs, att.GuestAddr)
	}
	ping(c, "after wake")
	if got := sh(t, c, netFiles); got != files {
		t.Errorf("the network files after wake: %q; before suspend: %q", got, files)
	}
}
