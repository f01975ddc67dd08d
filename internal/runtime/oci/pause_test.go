package oci

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Each flavor claims what it can do on this host: every one pauses and
// joins a network; only runsc checkpoints memory (runc and crun would need
// CRIU, which does not work here), so they keep a filesystem snapshot.
func TestCapabilitiesPerFlavor(t *testing.T) {
	for _, tc := range []struct {
		flavor Flavor
		want   []runtime.Capability
	}{
		{FlavorRunc, []runtime.Capability{runtime.CapPause, runtime.CapFilesystemSnapshot, runtime.CapNetwork, runtime.CapLiveSnapshot}},
		{FlavorCrun, []runtime.Capability{runtime.CapPause, runtime.CapFilesystemSnapshot, runtime.CapNetwork, runtime.CapLiveSnapshot}},
		{FlavorRunsc, []runtime.Capability{runtime.CapPause, runtime.CapCheckpoint, runtime.CapFilesystemSnapshot, runtime.CapNetwork, runtime.CapLiveSnapshot}},
	} {
		t.Run(string(tc.flavor), func(t *testing.T) {
			want := runtime.NewCapabilities(tc.want...)
			if got := CapabilitiesOf(tc.flavor); got != want {
				t.Fatalf("CapabilitiesOf = %v, want %v", got, want)
			}
			if _, err := exec.LookPath(string(tc.flavor)); err != nil {
				t.Skipf("needs %s in PATH for Info", tc.flavor)
			}
			r, err := New(testConfig(t, tc.flavor))
			if err != nil {
				t.Fatal(err)
			}
			info := r.Info()
			if info.Capabilities != want {
				t.Fatalf("Info().Capabilities = %v, want %v", info.Capabilities, want)
			}
			if _, err := runtime.AsPauser(r); err != nil {
				t.Fatalf("AsPauser: %v", err)
			}
		})
	}
}

func TestPhaseOf(t *testing.T) {
	for _, tc := range []struct {
		status  string
		want    runtime.Phase
		wantErr bool
	}{
		{"creating", runtime.PhaseCreated, false},
		{"created", runtime.PhaseCreated, false},
		{"running", runtime.PhaseRunning, false},
		{"paused", runtime.PhasePaused, false},
		{"stopped", runtime.PhaseStopped, false},
		{"pausing", "", true},
		{"", "", true},
	} {
		t.Run(tc.status, func(t *testing.T) {
			got, err := PhaseOf(tc.status)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("PhaseOf(%q) = %q, %v; want %q, error %v", tc.status, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// A sandbox paused from outside (`runc|crun|runsc pause`) is paused to
// State, also right after State saw it running (its init process alive:
// the shortcut that skips asking the runtime must notice the freezer, or
// runsc's rewritten state file); `resume` makes it running again, and a
// running sandbox is observed from the live cache.
func TestExternalPauseIsPaused(t *testing.T) {
	airtest.RequireRoot(t)
	agent := airtest.BuildAgent(t)
	template := airtest.BusyboxRootfs(t)
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			r, err := New(testConfig(t, flavor))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			id := model.NewSandboxID()
			t.Cleanup(func() {
				if err := r.Delete(context.Background(), id); err != nil {
					t.Errorf("Delete: %v", err)
				}
			})
			spec := runtime.Spec{ID: id, RootFS: runtime.RootFS{Lower: template}, AgentBinary: agent,
				Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: 64}}
			if err := r.Create(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
			phase := func(want runtime.Phase) {
				t.Helper()
				// crun's pause returns while the freezer is still
				// freezing, and crun calls the container running until
				// it is frozen.
				deadline := time.Now().Add(10 * time.Second)
				for {
					st, err := r.State(ctx, id)
					if err == nil && st.Phase == want || time.Now().After(deadline) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				for range 2 { // the second may come from the live cache
					st, err := r.State(ctx, id)
					if err != nil || st.Phase != want {
						t.Fatalf("State = %+v, %v; want %s", st, err, want)
					}
				}
				if phase, _, cached := r.cachedPhase(id); !cached || phase != want {
					t.Fatalf("State of a %s sandbox left the live cache at %q (hit %v)", want, phase, cached)
				}
			}
			phase(runtime.PhaseRunning)
			for _, step := range []struct {
				cmd  string
				want runtime.Phase
			}{
				{"pause", runtime.PhasePaused},
				{"resume", runtime.PhaseRunning},
			} {
				// The binary as the runtime runs it (crun: without a hybrid
				// host's cgroup2 mount).
				if out, err := r.command(ctx, step.cmd, id.String()).CombinedOutput(); err != nil {
					t.Fatalf("%s %s: %v\n%s", flavor, step.cmd, err, out)
				}
				phase(step.want)
			}
		})
	}
}
