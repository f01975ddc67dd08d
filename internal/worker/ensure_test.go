package worker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Ensure starts from what the runtime reports: it creates a missing
// sandbox, recreates a stopped one, starts a created one, adopts a running
// one and resumes a paused one (alive: never destroyed), through the
// capability the runtime claims.
func TestEnsureByPhase(t *testing.T) {
	pause := runtime.NewCapabilities(runtime.CapPause)
	for _, tc := range []struct {
		name      string
		phase     runtime.Phase
		caps      runtime.Capabilities
		wantCalls []string
		wantErr   error // nil: only the (fake) agent's silence
	}{
		{"missing", "", pause, []string{"create", "start"}, nil},
		{"created", runtime.PhaseCreated, pause, []string{"start"}, nil},
		{"running", runtime.PhaseRunning, pause, nil, nil},
		{"paused", runtime.PhasePaused, pause, []string{"resume"}, nil},
		{"paused without CapPause", runtime.PhasePaused, runtime.Capabilities{}, nil, runtime.ErrNotSupported},
		{"stopped", runtime.PhaseStopped, pause, []string{"delete", "create", "start"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &fakeRuntime{phase: tc.phase, caps: tc.caps}
			w, err := New(Config{
				Runtime: rt, AgentBinary: "/bin/true", AgentWait: 50 * time.Millisecond,
				TemplateDir: func(model.TemplateDigest) (string, error) { return "/tpl", nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			err = w.Ensure(context.Background(), model.Sandbox{ID: model.NewSandboxID()})
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Ensure = %v, want %v", err, tc.wantErr)
			}
			if err == nil {
				t.Fatal("Ensure succeeded without an agent")
			}
			if !slices.Equal(rt.calls, tc.wantCalls) {
				t.Fatalf("runtime calls = %q, want %q", rt.calls, tc.wantCalls)
			}
		})
	}
}

// A create asks the runtime to start the sandbox in the same step
// (spec.Start), and still calls Start after it.
func TestEnsureCreatesStarted(t *testing.T) {
	rt := &fakeRuntime{}
	w, err := New(Config{
		Runtime: rt, AgentBinary: "/bin/true", AgentWait: 50 * time.Millisecond,
		TemplateDir: func(model.TemplateDigest) (string, error) { return "/tpl", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_ = w.Ensure(context.Background(), model.Sandbox{ID: model.NewSandboxID()}) // the fake agent never answers
	if len(rt.created) != 1 || !rt.created[0].Start {
		t.Fatalf("created %+v, want one spec with Start", rt.created)
	}
	if !slices.Equal(rt.calls, []string{"create", "start"}) {
		t.Fatalf("runtime calls = %q, want create, start", rt.calls)
	}
}

// Observe passes a paused sandbox on as paused, and it counts as alive.
func TestObservePaused(t *testing.T) {
	rt := &fakeRuntime{phase: runtime.PhasePaused, caps: runtime.NewCapabilities(runtime.CapPause)}
	w, err := New(Config{Runtime: rt, AgentBinary: "/bin/true", TemplateDir: func(model.TemplateDigest) (string, error) { return "/tpl", nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	st, err := w.Observe(context.Background(), model.NewSandboxID())
	if err != nil || st.Phase != runtime.PhasePaused || !st.Phase.Alive() {
		t.Fatalf("Observe = %+v, %v; want a live paused sandbox", st, err)
	}
}
