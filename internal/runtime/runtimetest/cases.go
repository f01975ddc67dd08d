package runtimetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

type newRuntimeFunc = func(t *testing.T) runtime.Runtime

func testLifecycle(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	ctx := ctxFor(t)
	spec := s.spec(defaultResources, nil)
	t.Cleanup(func() { s.deleteAndCheck(t, rt, spec.ID) })

	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	mustState(t, rt, spec.ID, runtime.PhaseCreated)
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create of a created sandbox: %v", err)
	}
	mustState(t, rt, spec.ID, runtime.PhaseCreated)
	ids, err := rt.List(ctx)
	if err != nil || !slices.Contains(ids, spec.ID) {
		t.Fatalf("List = %v, %v; want it to contain %s", ids, err, spec.ID)
	}

	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	st := mustState(t, rt, spec.ID, runtime.PhaseRunning)
	if st.Pid <= 0 || st.ID != spec.ID || st.OOMKilled {
		t.Fatalf("State of a running sandbox = %+v", st)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start of a running sandbox: %v", err)
	}
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create of a running sandbox: %v", err)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	info, err := client(t, rt, spec.ID).Info(ctx)
	if err != nil || info.Protocol != agentproto.ProtocolVersion {
		t.Fatalf("agent Info = %+v, %v", info, err)
	}

	if err := rt.Stop(ctx, spec.ID); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	st = mustState(t, rt, spec.ID, runtime.PhaseStopped)
	if st.OOMKilled || st.Pid != 0 {
		t.Fatalf("State after Stop = %+v", st)
	}
	if err := rt.Stop(ctx, spec.ID); err != nil {
		t.Fatalf("Stop of a stopped sandbox: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err == nil {
		t.Fatal("Start of a stopped sandbox succeeded")
	}
	if err := rt.Create(ctx, spec); err == nil {
		t.Fatal("Create over a stopped sandbox succeeded")
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if conn, err := rt.DialAgent(dctx, spec.ID); err == nil {
		conn.Close()
		t.Fatal("DialAgent of a stopped sandbox succeeded")
	} else if dctx.Err() != nil {
		t.Fatalf("DialAgent of a stopped sandbox waited for its whole context instead of failing: %v", err)
	}

	if err := rt.Delete(ctx, spec.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	s.assertGone(t, rt, spec.ID)
	if err := rt.Delete(ctx, spec.ID); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := rt.Stop(ctx, spec.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("Stop after Delete = %v, want ErrNotFound", err)
	}
	if err := rt.Start(ctx, spec.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("Start after Delete = %v, want ErrNotFound", err)
	}
}

// testCreateStarted: a Create asked to start the sandbox too (spec.Start)
// leaves it created or running; Start then runs it (or does nothing), and
// both stay idempotent.
func testCreateStarted(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	ctx := ctxFor(t)
	spec := s.spec(defaultResources, nil)
	spec.Start = true
	t.Cleanup(func() { s.deleteAndCheck(t, rt, spec.ID) })

	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if st, err := rt.State(ctx, spec.ID); err != nil || st.Phase != runtime.PhaseCreated && st.Phase != runtime.PhaseRunning {
		t.Fatalf("State after a Create with Start = %+v, %v; want created or running", st, err)
	}
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create again: %v", err)
	}
	for range 2 {
		if err := rt.Start(ctx, spec.ID); err != nil {
			t.Fatalf("Start: %v", err)
		}
		st := mustState(t, rt, spec.ID, runtime.PhaseRunning)
		if st.Pid <= 0 || st.ID != spec.ID {
			t.Fatalf("State of a running sandbox = %+v", st)
		}
	}
	info, err := client(t, rt, spec.ID).Info(ctx)
	if err != nil || info.Protocol != agentproto.ProtocolVersion {
		t.Fatalf("agent Info = %+v, %v", info, err)
	}
}

func testUnknownSandbox(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	ctx := ctxFor(t)
	id := model.NewSandboxID()
	if _, err := rt.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State = %v, want ErrNotFound", err)
	}
	if err := rt.Start(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Start = %v, want ErrNotFound", err)
	}
	if err := rt.Stop(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Stop = %v, want ErrNotFound", err)
	}
	if err := rt.Delete(ctx, id); err != nil {
		t.Errorf("Delete = %v, want nil", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := rt.DialAgent(dctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("DialAgent = %v, want ErrNotFound", err)
	}
	s.assertGone(t, rt, id)
}

func testEchoAndEnv(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, model.Env{"AIRLOCK_TEST_VAR": "hello world"})
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	if res := run(t, c, "echo", "hello"); string(res.Stdout) != "hello\n" || res.ExitCode != 0 {
		t.Fatalf("echo hello = %+v", res)
	}
	if got := sh(t, c, `printf %s "$AIRLOCK_TEST_VAR"`); got != "hello world" {
		t.Fatalf("AIRLOCK_TEST_VAR = %q", got)
	}
	if got := sh(t, c, `echo "$PATH"`); !strings.Contains(got, "/bin") {
		t.Fatalf("PATH = %q", got)
	}
	if got := sh(t, c, "hostname; id -u; pwd"); got != "airlock-test\n0\n/\n" {
		t.Fatalf("hostname, uid, cwd = %q", got)
	}
	res := run(t, c, "sh", "-c", "echo oops >&2; exit 3")
	if res.ExitCode != 3 || string(res.Stderr) != "oops\n" {
		t.Fatalf("exit 3 = %+v", res)
	}
}

func testWritableRoot(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	sh(t, c, "echo written > /written.txt && echo changed > /"+markerFile+" && mkdir -p /a/b && echo deep > /a/b/c && rm /etc/hosts")
	if got := sh(t, c, "cat /written.txt /"+markerFile+" /a/b/c; test ! -e /etc/hosts && echo gone"); got != "written\nchanged\ndeep\ngone\n" {
		t.Fatalf("reading back writes = %q", got)
	}
	upper := inspector(t, rt).Artifacts(spec.ID).UpperDir
	if upper == "" {
		// A VM's writes land in its disk image, not in a host directory:
		// the guest-visible behaviour above and the template checks
		// below are what applies.
		t.Log("the runtime has no host upper directory: its contents are not checked")
	}
	for name, want := range map[string]string{"written.txt": "written\n", markerFile: "changed\n", "a/b/c": "deep\n"} {
		if upper == "" {
			break
		}
		got, err := os.ReadFile(filepath.Join(upper, name))
		if err != nil || string(got) != want {
			t.Errorf("upper dir %s = %q, %v; want %q", name, got, err, want)
		}
	}
	if got, err := os.ReadFile(filepath.Join(s.template, markerFile)); err != nil || string(got) != markerContent {
		t.Fatalf("template marker = %q, %v: the template changed", got, err)
	}
	if _, err := os.Stat(filepath.Join(s.template, "etc", "hosts")); err != nil {
		t.Fatalf("template /etc/hosts: %v", err)
	}
}

func testIsolatedWrites(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	a, b := s.spec(defaultResources, nil), s.spec(defaultResources, nil)
	s.started(t, rt, a)
	s.started(t, rt, b)
	ca, cb := client(t, rt, a.ID), client(t, rt, b.ID)
	sh(t, ca, "echo a > /only-in-a && echo from-a > /"+markerFile)
	sh(t, cb, "echo b > /only-in-b")
	if got := sh(t, cb, "test -e /only-in-a && echo visible; cat /"+markerFile); got != markerContent {
		t.Fatalf("sandbox b sees a's writes: %q", got)
	}
	if got := sh(t, ca, "test -e /only-in-b && echo visible; cat /"+markerFile); got != "from-a\n" {
		t.Fatalf("sandbox a sees b's writes or lost its own: %q", got)
	}
}

func testLoopbackOnly(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	out := sh(t, client(t, rt, spec.ID), "cat /proc/net/dev")
	var ifaces []string
	for _, l := range lines(out) {
		if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Fatalf("network interfaces = %q, want only lo\n%s", ifaces, out)
	}
}

func testLimitsOnHost(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	res := runtime.Resources{CPUs: 2, MemoryBytes: 200 << 20, PidsLimit: 50}
	spec := s.spec(res, nil)
	s.started(t, rt, spec)
	cg := inspector(t, rt).Artifacts(spec.ID).Cgroup
	if cg == "" {
		t.Fatal("the runtime reports no cgroup for the sandbox")
	}
	lim, err := s.cgroups.Limits(cg)
	if err != nil {
		t.Fatal(err)
	}
	if lim.CPUQuotaMicros <= 0 || lim.CPUPeriodMicros <= 0 || lim.CPUQuotaMicros != int64(res.CPUs)*lim.CPUPeriodMicros {
		t.Errorf("cpu quota/period = %d/%d, want %d CPUs", lim.CPUQuotaMicros, lim.CPUPeriodMicros, res.CPUs)
	}
	if lim.MemoryBytes != res.MemoryBytes {
		t.Errorf("memory limit = %d, want %d", lim.MemoryBytes, res.MemoryBytes)
	}
	if lim.PidsMax == cgroups.Unlimited || lim.PidsMax < res.PidsLimit {
		t.Errorf("pids limit = %d, want at least %d", lim.PidsMax, res.PidsLimit)
	}
	// On a shared kernel the host limit is the guest's plus bounded room
	// for the agent, which enforces the guest's on the workload itself
	// (PidsLimitCannotBeLifted, ForkBombIsContained).
	if rt.Info().Isolation == environment.IsolationSharedKernel && lim.PidsMax > res.PidsLimit+maxAgentPids {
		t.Errorf("pids limit = %d, want at most %d + %d on a shared kernel", lim.PidsMax, res.PidsLimit, maxAgentPids)
	}
}

// maxAgentPids is the most room a shared-kernel runtime may keep for the
// agent beside the workload's pids limit.
const maxAgentPids = 128

func testMemoryHog(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	sh(t, c, "echo warm")
	// dd allocates one buffer of bs bytes and fills it: twice the limit.
	hog := []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=512M", "count=1"}
	if isVM(rt) {
		// The guest kernel's heuristic overcommit refuses one allocation
		// larger than the VM's RAM (dd: out of memory) before anything
		// is filled: let it overcommit, so the hog fills memory and the
		// guest's OOM killer has to act.
		sh(t, c, "echo 1 > /proc/sys/vm/overcommit_memory")
	}
	start := time.Now()
	switch scope := rt.Info().OOMScope; scope {
	case environment.OOMKillsProcess:
		res := run(t, c, hog...)
		if res.Signal != "KILL" {
			t.Fatalf("memory hog = %+v, want it killed with KILL", res)
		}
		mustState(t, rt, spec.ID, runtime.PhaseRunning)
		if got := sh(t, c, "echo still here"); got != "still here\n" {
			t.Fatalf("after the OOM kill: %q", got)
		}
	case environment.OOMKillsSandbox:
		res, err := tryRun(t, c, hog...)
		if err == nil && res.Signal != "KILL" {
			t.Fatalf("memory hog = %+v, want it or the sandbox killed", res)
		}
		waitFor(t, 60*time.Second, "the sandbox to stop", func() (bool, string) {
			st, err := rt.State(ctxFor(t), spec.ID)
			return err == nil && st.Phase == runtime.PhaseStopped, ""
		})
		st := mustState(t, rt, spec.ID, runtime.PhaseStopped)
		if !st.OOMKilled {
			t.Fatalf("State after the OOM kill = %+v, want OOMKilled", st)
		}
	default:
		t.Fatalf("unknown OOMScope %q", scope)
	}
	t.Logf("OOM kill took %v", time.Since(start))
}

func testForkBomb(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	res := defaultResources
	res.PidsLimit = 32
	spec := s.spec(res, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	// Well below the limit, processes run.
	if got := sh(t, c, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1 & done; wait; echo ok"); got != "ok\n" {
		t.Fatalf("ten sleeps: %q", got)
	}
	bomb := run(t, c, "sh", "-c", "i=0; while [ $i -lt 300 ]; do sleep 3 & i=$((i+1)); done; echo all spawned")
	if bomb.ExitCode == 0 || strings.Contains(string(bomb.Stdout), "all spawned") || !strings.Contains(string(bomb.Stderr), "fork") {
		t.Fatalf("fork bomb was not stopped: %+v (stdout %q, stderr %q)", bomb, bomb.Stdout, bomb.Stderr)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	waitFor(t, 60*time.Second, "the sandbox to answer after the fork bomb", func() (bool, string) {
		res, err := tryRun(t, c, "echo", "alive")
		return err == nil && string(res.Stdout) == "alive\n", string(res.Stderr) + errString(err)
	})
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func testSurvivesRestart(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt1 := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt1, spec)
	ctx := ctxFor(t)
	c1 := client(t, rt1, spec.ID)
	procID := model.NewProcessID().String()
	if _, err := c1.Start(ctx, agentproto.StartRequest{ID: procID, Args: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	c1.Close()

	rt2 := newRuntime(t) // a restarted server: same configuration, fresh value
	ids, err := rt2.List(ctx)
	if err != nil || !slices.Contains(ids, spec.ID) {
		t.Fatalf("List after restart = %v, %v", ids, err)
	}
	mustState(t, rt2, spec.ID, runtime.PhaseRunning)
	c2 := client(t, rt2, spec.ID)
	ps, err := c2.Status(ctx, procID)
	if err != nil || !ps.Running {
		t.Fatalf("process started before the restart: %+v, %v", ps, err)
	}
	if got := sh(t, c2, "echo again"); got != "again\n" {
		t.Fatalf("echo after restart = %q", got)
	}
	if err := rt2.Create(ctx, spec); err != nil {
		t.Fatalf("Create after restart (re-adoption) = %v", err)
	}
	if ps, err := c2.Status(ctx, procID); err != nil || !ps.Running {
		t.Fatalf("Create after restart disturbed the sandbox: %+v, %v", ps, err)
	}
}

func testOrphanStateDir(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	ctx := ctxFor(t)
	id := model.NewSandboxID()
	dir := inspector(t, rt).Artifacts(id).StateDir
	t.Cleanup(func() { _ = rt.Delete(context.Background(), id) }) // also on failure
	if err := os.MkdirAll(filepath.Join(dir, "half-written"), 0o700); err != nil {
		t.Fatal(err)
	}
	ids, err := rt.List(ctx)
	if err != nil || !slices.Contains(ids, id) {
		t.Fatalf("List = %v, %v; want the orphan %s", ids, err, id)
	}
	if _, err := rt.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("State of an orphan state dir = %v, want ErrNotFound", err)
	}
	s.deleteAndCheck(t, rt, id)
}

func crashStates(t *testing.T, rt runtime.Runtime) []CrashState {
	cs, ok := rt.(CrashSimulator)
	if !ok {
		t.Skipf("%T does not implement runtimetest.CrashSimulator", rt)
	}
	states := cs.CrashStates()
	if len(states) == 0 {
		t.Fatal("CrashStates returned none")
	}
	return states
}

func testCrashLeftovers(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	for i, state := range crashStates(t, newRuntime(t)) {
		t.Run(state.Name, func(t *testing.T) {
			t.Parallel()
			s.slots.acquire(t, 1)
			rt := newRuntime(t)
			state := crashStates(t, rt)[i] // bound to this test's runtime
			ctx := ctxFor(t)
			spec := s.spec(defaultResources, nil)
			t.Cleanup(func() { _ = rt.Delete(context.Background(), spec.ID) })
			if err := state.Make(ctx, spec); err != nil {
				t.Fatalf("making the partial state: %v", err)
			}
			ids, err := rt.List(ctx)
			if err != nil || !slices.Contains(ids, spec.ID) {
				t.Fatalf("List = %v, %v; want it to find the leftover", ids, err)
			}
			s.deleteAndCheck(t, rt, spec.ID)
		})
	}
}

func testCreateOverLeftovers(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	for i, state := range crashStates(t, newRuntime(t)) {
		t.Run(state.Name, func(t *testing.T) {
			t.Parallel()
			s.slots.acquire(t, 1)
			rt := newRuntime(t)
			state := crashStates(t, rt)[i] // bound to this test's runtime
			spec := s.spec(defaultResources, nil)
			// (A failure below must not leave the leftover behind.)
			t.Cleanup(func() { _ = rt.Delete(context.Background(), spec.ID) })
			if err := state.Make(ctxFor(t), spec); err != nil {
				t.Fatalf("making the partial state: %v", err)
			}
			if state.CreateRefuses {
				if err := rt.Create(ctxFor(t), spec); err == nil {
					t.Fatal("Create over the leftover succeeded")
				}
				s.deleteAndCheck(t, rt, spec.ID)
			}
			s.started(t, rt, spec)
			if got := sh(t, client(t, rt, spec.ID), "echo recreated > /x && cat /x"); got != "recreated\n" {
				t.Fatalf("sandbox created over the leftover: %q", got)
			}
		})
	}
}
