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
			_, err = w.Suspend(context.Background(), sb, "")
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

// kindRuntime is fakeRuntime whose Suspend and SuspendFilesystem record
// which ran and write a snapshot of their kind.
type kindRuntime struct{ *fakeRuntime }

func (k *kindRuntime) Suspend(context.Context, model.SandboxID) (runtime.Snapshot, error) {
	k.record("suspend")
	kind := runtime.SnapshotKindOf(k.caps)
	return runtime.Snapshot{Kind: kind, Format: string(kind)}, nil
}

func (k *kindRuntime) SuspendFilesystem(context.Context, model.SandboxID) (runtime.Snapshot, error) {
	k.record("suspend-filesystem")
	return runtime.Snapshot{Kind: model.SnapshotFilesystem, Format: "fs"}, nil
}

func (k *kindRuntime) ForgetSnapshot(context.Context, model.SandboxID) error { return nil }

// TestSuspendKind: the kind a suspend asks for picks the runtime's call —
// its Suspend for its own kind (or none asked), SuspendFilesystem for a
// filesystem snapshot on a runtime that checkpoints by default — and a
// kind the runtime cannot write is refused for good (ErrPermanent), the
// runtime not called.
func TestSuspendKind(t *testing.T) {
	both := runtime.NewCapabilities(runtime.CapCheckpoint, runtime.CapFilesystemSnapshot)
	memOnly := runtime.NewCapabilities(runtime.CapCheckpoint)
	fsOnly := runtime.NewCapabilities(runtime.CapFilesystemSnapshot)
	for _, tc := range []struct {
		name string
		caps runtime.Capabilities
		kind model.SnapshotKind
		call string // "": refused
		want model.SnapshotKind
	}{
		{"runsc, none asked", both, "", "suspend", model.SnapshotMemory},
		{"runsc, memory", both, model.SnapshotMemory, "suspend", model.SnapshotMemory},
		{"runsc, filesystem", both, model.SnapshotFilesystem, "suspend-filesystem", model.SnapshotFilesystem},
		{"runc, filesystem", fsOnly, model.SnapshotFilesystem, "suspend", model.SnapshotFilesystem},
		{"runc, memory", fsOnly, model.SnapshotMemory, "", ""},
		{"qemu, filesystem", memOnly, model.SnapshotFilesystem, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &kindRuntime{&fakeRuntime{phase: runtime.PhaseRunning, caps: tc.caps}}
			w, err := New(Config{Runtime: rt, TemplateDir: func(model.TemplateDigest) (string, error) { return "", nil }, AgentBinary: "/bin/true"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			sb := model.Sandbox{ID: model.NewSandboxID(), State: model.StateSuspending}
			snap, err := w.Suspend(context.Background(), sb, tc.kind)
			rt.mu.Lock()
			var calls []string
			for _, c := range rt.calls {
				if c == "suspend" || c == "suspend-filesystem" {
					calls = append(calls, c)
				}
			}
			rt.mu.Unlock()
			if tc.call == "" {
				if !errors.Is(err, ErrPermanent) || !errors.Is(err, runtime.ErrNotSupported) {
					t.Fatalf("Suspend = %+v, %v; want a permanent not-supported refusal", snap, err)
				}
				if len(calls) != 0 {
					t.Fatalf("the runtime was called: %v", calls)
				}
				return
			}
			if err != nil || snap.Kind != tc.want {
				t.Fatalf("Suspend = %+v, %v; want a %s snapshot", snap, err, tc.want)
			}
			if len(calls) != 1 || calls[0] != tc.call {
				t.Fatalf("runtime calls %v, want [%s]", calls, tc.call)
			}
		})
	}
}
