package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// suspendingRuntime is fakeRuntime with a Suspend that fails with err,
// leaving the sandbox in phase after ("" = no container: the suspend had
// passed its point of no return).
type suspendingRuntime struct {
	*fakeRuntime
	err   error
	after runtime.Phase
}

func (s *suspendingRuntime) Suspend(context.Context, model.SandboxID) (runtime.Snapshot, error) {
	s.record("suspend")
	s.mu.Lock()
	s.phase = s.after
	s.mu.Unlock()
	return runtime.Snapshot{}, s.err
}

func (s *suspendingRuntime) ForgetSnapshot(context.Context, model.SandboxID) error { return nil }

// TestSuspendFailureSaysWhetherTheSandboxStopped: a suspend that fails
// with the sandbox gone from the runtime (or stopped in it) wraps
// ErrStopped; one that fails with the sandbox still alive does not.
func TestSuspendFailureSaysWhetherTheSandboxStopped(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name        string
		after       runtime.Phase
		wantStopped bool
	}{
		{"container gone", "", true},
		{"stopped", runtime.PhaseStopped, true},
		{"still running", runtime.PhaseRunning, false},
		{"still paused", runtime.PhasePaused, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &suspendingRuntime{fakeRuntime: &fakeRuntime{phase: runtime.PhaseRunning, caps: runtime.NewCapabilities(runtime.CapFilesystemSnapshot)},
				err: boom, after: tc.after}
			w, err := New(Config{Runtime: rt, TemplateDir: func(model.TemplateDigest) (string, error) { return "", nil }, AgentBinary: "/bin/true"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			sb := model.Sandbox{ID: model.NewSandboxID(), State: model.StateSuspending}
			_, err = w.Suspend(context.Background(), sb)
			if !errors.Is(err, boom) {
				t.Fatalf("Suspend = %v, want the runtime's error", err)
			}
			if got := errors.Is(err, ErrStopped); got != tc.wantStopped {
				t.Fatalf("Suspend = %v: ErrStopped %v, want %v", err, got, tc.wantStopped)
			}
			if got := w.Stopped(context.Background(), sb.ID); got != tc.wantStopped {
				t.Fatalf("Stopped = %v, want %v", got, tc.wantStopped)
			}
		})
	}
}
