package runtimetest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// testCapabilitiesConsistent checks that what a runtime claims in
// Info().Capabilities it has: the methods of each claimed capability
// (CapPause: runtime.Pauser; CapCheckpoint and CapFilesystemSnapshot:
// runtime.Suspender), reachable through the accessor callers use;
// and that an unclaimed one is refused with ErrNotSupported whatever
// methods the value has. Every value of one configuration claims the same.
func testCapabilitiesConsistent(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	caps := rt.Info().Capabilities
	t.Logf("%s claims %v", rt.Info().Name, caps)
	for _, c := range caps.List() {
		if _, err := runtime.ParseCapability(string(c)); err != nil {
			t.Errorf("claims an unknown capability: %v", err)
		}
	}
	_, implements := rt.(runtime.Pauser)
	p, err := runtime.AsPauser(rt)
	switch {
	case caps.Has(runtime.CapPause) && !implements:
		t.Errorf("%T claims %s without implementing runtime.Pauser", rt, runtime.CapPause)
	case caps.Has(runtime.CapPause) && (err != nil || p == nil):
		t.Errorf("AsPauser of a runtime claiming %s = %v, %v", runtime.CapPause, p, err)
	case !caps.Has(runtime.CapPause) && !errors.Is(err, runtime.ErrNotSupported):
		t.Errorf("AsPauser of a runtime not claiming %s = %v, want ErrNotSupported", runtime.CapPause, err)
	}
	checkSuspenderClaim(t, rt)
	if _, implements := rt.(runtime.LiveSnapshotter); rt.Info().Capabilities.Has(runtime.CapLiveSnapshot) && !implements {
		t.Errorf("%T claims %s without implementing runtime.LiveSnapshotter", rt, runtime.CapLiveSnapshot)
	}
	if again := newRuntime(t).Info().Capabilities; again != caps {
		t.Errorf("a second value of the same configuration claims %v, the first %v", again, caps)
	}
}

// pauser returns rt's pause methods, skipping the test when it does not
// claim CapPause.
func pauser(t *testing.T, rt runtime.Runtime) runtime.Pauser {
	t.Helper()
	if !rt.Info().Capabilities.Has(runtime.CapPause) {
		t.Skipf("%s does not claim %s", rt.Info().Name, runtime.CapPause)
	}
	p, err := runtime.AsPauser(rt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// counterScript counts as fast as it can into /counter, replacing it
// whole each time (a reader never sees it truncated).
const counterScript = `i=0; while :; do i=$((i+1)); echo $i > /counter.new; mv -f /counter.new /counter; done`

// readCounter reads the counter counterScript writes (retrying over the
// instant the file is truncated).
func readCounter(t *testing.T, c *agentclient.Client) int {
	t.Helper()
	for range 20 {
		if n, err := strconv.Atoi(strings.TrimSpace(sh(t, c, "cat /counter"))); err == nil {
			return n
		}
	}
	t.Fatal("/counter never held a number")
	return 0
}

// testPauseResume checks Pause and Resume on a runtime claiming CapPause:
// a paused sandbox is in PhasePaused (also to a new runtime value, as after
// a server restart), runs nothing (a counting process's file, read on the
// host, stands still and the agent does not answer), is left alone by Create and refused by
// Start; both methods are idempotent; after Resume the same processes
// continue; Stop stops a paused sandbox.
func testPauseResume(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	p := pauser(t, rt)
	ctx := ctxFor(t)
	unknown := model.NewSandboxID()
	if err := p.Pause(ctx, unknown); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Pause of an unknown sandbox = %v, want ErrNotFound", err)
	}
	if err := p.Resume(ctx, unknown); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Resume of an unknown sandbox = %v, want ErrNotFound", err)
	}

	spec := s.spec(defaultResources, nil)
	t.Cleanup(func() { s.deleteAndCheck(t, rt, spec.ID) })
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := p.Pause(ctx, spec.ID); err == nil {
		t.Fatal("Pause of a created (not started) sandbox succeeded")
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	c := client(t, rt, spec.ID)
	counter := model.NewProcessID().String()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: counter, Args: []string{"sh", "-c", counterScript}}); err != nil {
		t.Fatalf("start the counter: %v", err)
	}
	waitFor(t, 10*time.Second, "the counter to count", func() (bool, string) {
		out, _ := tryRun(t, c, "cat", "/counter")
		return len(strings.TrimSpace(string(out.Stdout))) > 0, string(out.Stderr)
	})
	const interval = time.Second
	running := readCounter(t, c)
	if err := p.Pause(ctx, spec.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	mustState(t, rt, spec.ID, runtime.PhasePaused)
	mustState(t, newRuntime(t), spec.ID, runtime.PhasePaused)
	// Nothing runs: the counter, read on the host, stands still. (A VM
	// has no host upper directory: the agent's silence below, and the
	// counter continuing after Resume, are what is checked.)
	if upper := inspector(t, rt).Artifacts(spec.ID).UpperDir; upper != "" {
		hostCounter := filepath.Join(upper, "counter")
		frozenAt, err := os.ReadFile(hostCounter)
		if err != nil {
			t.Fatalf("the counter on the host: %v", err)
		}
		time.Sleep(interval)
		if later, err := os.ReadFile(hostCounter); err != nil || string(later) != string(frozenAt) {
			t.Errorf("the counter went from %q to %q (%v) while paused for %v", frozenAt, later, err, interval)
		}
	}
	if err := p.Pause(ctx, spec.ID); err != nil {
		t.Fatalf("Pause of a paused sandbox: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err == nil {
		t.Error("Start of a paused sandbox succeeded")
	}
	_ = rt.Create(ctx, spec) // an error or nothing; it must not touch the sandbox
	mustState(t, rt, spec.ID, runtime.PhasePaused)
	probe := agentclient.New(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, spec.ID) }, testLogger(t))
	pctx, cancel := context.WithTimeout(ctx, interval)
	_, err := probe.Run(pctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"true"}})
	cancel()
	probe.Close()
	if err == nil {
		t.Error("a paused sandbox ran a command")
	}

	if err := p.Resume(ctx, spec.ID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	if err := p.Resume(ctx, spec.ID); err != nil {
		t.Fatalf("Resume of a running sandbox: %v", err)
	}
	after := readCounter(t, c)
	if after < running {
		t.Fatalf("the counter went back from %d to %d", running, after)
	}
	if st, err := c.Status(ctx, counter); err != nil || !st.Running {
		t.Fatalf("the counter after Resume: %+v, %v", st, err)
	}
	waitFor(t, 10*time.Second, "the counter to continue", func() (bool, string) {
		n := readCounter(t, c)
		return n > after, strconv.Itoa(n)
	})

	if err := p.Pause(ctx, spec.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := rt.Stop(ctx, spec.ID); err != nil {
		t.Fatalf("Stop of a paused sandbox: %v", err)
	}
	mustState(t, rt, spec.ID, runtime.PhaseStopped)
	if err := p.Resume(ctx, spec.ID); err == nil {
		t.Error("Resume of a stopped sandbox succeeded")
	}
}

// testDeletePaused checks that Delete removes a paused sandbox without a
// trace.
func testDeletePaused(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	p := pauser(t, rt)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	sh(t, client(t, rt, spec.ID), "sleep 300 >/dev/null 2>&1 & echo started")
	if err := p.Pause(ctxFor(t), spec.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	mustState(t, rt, spec.ID, runtime.PhasePaused)
	s.deleteAndCheck(t, rt, spec.ID)
}
