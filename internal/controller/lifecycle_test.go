package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/store"
)

// TestEveryLifecycleStepHasAWorkerCall: the controller can run every step
// (and cleanup step) the lifecycle table names: by a worker call, or
// itself (a step that needs its operation's record).
func TestEveryLifecycleStepHasAWorkerCall(t *testing.T) {
	for _, lc := range model.Lifecycles() {
		for _, step := range []model.Step{lc.Step, lc.Cleanup} {
			if step == "" {
				continue
			}
			if _, ok := stepCalls[step]; !ok && !controllerSteps[step] {
				t.Errorf("lifecycle %s: step %q has no worker call", lc.Kind, step)
			}
		}
	}
}

func TestDefaultBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt  int
		min, max time.Duration
	}{
		{0, 250 * time.Millisecond, 500 * time.Millisecond},
		{1, 500 * time.Millisecond, time.Second},
		{3, 2 * time.Second, 4 * time.Second},
		{5, 8 * time.Second, 16 * time.Second},
		{50, 8 * time.Second, 16 * time.Second},
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := DefaultBackoff(tc.attempt)
			if d < tc.min || d > tc.max {
				t.Fatalf("DefaultBackoff(%d) = %s, want %s–%s", tc.attempt, d, tc.min, tc.max)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("DefaultBackoff(%d) has no jitter: always %v", tc.attempt, seen)
		}
	}
}

// TestRetrySetsNotBefore: a transient failure gives up the lease and sets
// not_before = now + backoff; the operation is not claimable before it, and
// is at it — however long the lease would have been.
func TestRetrySetsNotBefore(t *testing.T) {
	now := time.Now().Truncate(time.Microsecond)
	const backoff = 3 * time.Second
	var gotAttempt int
	e := newEnvWith(t, "runc", nil, Config{
		Lease: time.Hour,
		Now:   func() time.Time { return now },
		Backoff: func(attempt int) time.Duration {
			gotAttempt = attempt
			return backoff
		},
	})
	ctx := context.Background()
	_, opID := e.create()
	op, err := e.st.ClaimOperation(ctx, e.ctrl.claim())
	if err != nil || op.ID != opID {
		t.Fatalf("claim: %+v, %v", op, err)
	}
	e.ctrl.retryOrFail(ctx, op, true, errors.New("transient"), e.ctrl.log)
	if gotAttempt != 1 {
		t.Fatalf("backoff asked for attempt %d, want 1", gotAttempt)
	}
	got, err := e.st.GetOperation(ctx, e.project, opID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != model.OpRunning || !got.NotBefore.Equal(now.Add(backoff)) {
		t.Fatalf("after a transient failure: %+v, want running with NotBefore %s", got, now.Add(backoff))
	}
	for _, at := range []time.Time{now, now.Add(backoff - time.Microsecond)} {
		if op, err := e.st.ClaimOperation(ctx, store.Claim{Owner: e.node, Incarnation: e.inc, Lease: time.Minute, Now: at}); !errors.Is(err, store.ErrNoWork) {
			t.Fatalf("claim at %s: %+v, %v; want ErrNoWork before not_before", at, op, err)
		}
	}
	again, err := e.st.ClaimOperation(ctx, store.Claim{Owner: e.node, Incarnation: e.inc, Lease: time.Minute, Now: now.Add(backoff)})
	if err != nil || again.ID != opID || again.Attempts != 2 {
		t.Fatalf("claim at not_before: %+v, %v", again, err)
	}
}

// TestExhaustedRetriesFailThroughTheTable: the last attempt's failure moves
// the sandbox to its lifecycle's failure state.
func TestExhaustedRetriesFailThroughTheTable(t *testing.T) {
	e := newEnvWith(t, "runc", nil, Config{MaxAttempts: 1})
	ctx := context.Background()
	id, opID := e.create()
	op, err := e.st.ClaimOperation(ctx, e.ctrl.claim())
	if err != nil || op.ID != opID {
		t.Fatalf("claim: %+v, %v", op, err)
	}
	e.ctrl.retryOrFail(ctx, op, e.ctrl.retryable(op, errors.New("boom")), errors.New("boom"), e.ctrl.log)
	lc, err := model.LifecycleOf(model.OpCreate)
	if err != nil {
		t.Fatal(err)
	}
	if sb := e.sandbox(id); sb.State != lc.Failure || sb.StateReason != "boom" {
		t.Fatalf("sandbox %s %q, want %s", sb.State, sb.StateReason, lc.Failure)
	}
	if got, _ := e.st.GetOperation(ctx, e.project, opID); got.State != model.OpFailed || got.Error == nil {
		t.Fatalf("operation: %+v", got)
	}
}

// request queues a lifecycle operation of kind on a sandbox, as the API does.
func (e *env) request(id model.SandboxID, kind model.OperationKind) model.OperationID {
	e.t.Helper()
	now := time.Now()
	op := model.Operation{ID: model.NewOperationID(), ProjectID: e.project, SandboxID: id, Kind: kind,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if _, err := e.st.RequestOperation(context.Background(), store.OperationRequest{ProjectID: e.project, SandboxID: id, Operation: op, Now: now}); err != nil {
		e.t.Fatalf("request %s: %v", kind, err)
	}
	return op.ID
}

// TestPauseResumeThroughTheTable: pause and resume requests run their
// worker steps and end in the table's final states; a second request while
// one is under way is refused as busy.
func TestPauseResumeThroughTheTable(t *testing.T) {
	e := newEnv(t, "runc", nil)
	e.run()
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op)
	}
	for _, kind := range []model.OperationKind{model.OpPause, model.OpResume} {
		lc, err := model.LifecycleOf(kind)
		if err != nil {
			t.Fatal(err)
		}
		opID := e.request(id, kind)
		now := time.Now()
		again := model.Operation{ID: model.NewOperationID(), ProjectID: e.project, SandboxID: id, Kind: kind, State: model.OpPending, CreatedAt: now, UpdatedAt: now}
		if _, err := e.st.RequestOperation(context.Background(), store.OperationRequest{ProjectID: e.project, SandboxID: id, Operation: again, Now: now}); !errors.Is(err, model.ErrInvalidTransition) {
			t.Fatalf("a second %s while one is queued: %v, want ErrInvalidTransition", kind, err)
		}
		if op := e.waitOp(opID); op.State != model.OpSucceeded {
			t.Fatalf("%s: %+v", kind, op)
		}
		if sb := e.sandbox(id); sb.State != lc.Final {
			t.Fatalf("after %s: sandbox %s, want %s", kind, sb.State, lc.Final)
		}
		st, err := e.wk.Observe(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		want := map[model.OperationKind]runtime.Phase{model.OpPause: runtime.PhasePaused, model.OpResume: runtime.PhaseRunning}[kind]
		if st.Phase != want {
			t.Fatalf("after %s the runtime says %s, want %s", kind, st.Phase, want)
		}
	}
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
}

// TestSuspendWakeThroughTheTable: a suspend records the runtime's snapshot
// with the sandbox's suspended state; a wake restores it, clears the record
// and leaves a running sandbox whose agent answers; a delete of a suspended
// sandbox leaves nothing in the runtime.
func TestSuspendWakeThroughTheTable(t *testing.T) {
	for _, tc := range []struct {
		flavor string
		kind   model.SnapshotKind
	}{
		{"runc", model.SnapshotFilesystem},
		{"runsc", model.SnapshotMemory},
	} {
		t.Run(tc.flavor, func(t *testing.T) {
			e := newEnv(t, tc.flavor, nil)
			e.run()
			ctx := context.Background()
			id, opID := e.create()
			if op := e.waitOp(opID); op.State != model.OpSucceeded {
				t.Fatalf("create: %+v", op)
			}
			if op := e.waitOp(e.request(id, model.OpSuspend)); op.State != model.OpSucceeded {
				t.Fatalf("suspend: %+v", op)
			}
			sb := e.sandbox(id)
			if sb.State != model.StateSuspended || sb.Snapshot == nil || sb.Snapshot.Kind != tc.kind || sb.Snapshot.Location == "" {
				t.Fatalf("after suspend: %s, snapshot %+v; want suspended with a %s snapshot", sb.State, sb.Snapshot, tc.kind)
			}
			if _, err := e.wk.Observe(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
				t.Fatalf("a suspended sandbox's container: %v, want ErrNotFound", err)
			}
			// Resync keeps a suspended sandbox whose snapshot is there.
			if err := e.ctrl.Resync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := e.sandbox(id); got.State != model.StateSuspended {
				t.Fatalf("after resync: %s (%s)", got.State, got.StateReason)
			}
			if op := e.waitOp(e.request(id, model.OpWake)); op.State != model.OpSucceeded {
				t.Fatalf("wake: %+v", op)
			}
			sb = e.sandbox(id)
			if sb.State != model.StateRunning || sb.Snapshot != nil {
				t.Fatalf("after wake: %s, snapshot %+v", sb.State, sb.Snapshot)
			}
			agent, err := e.wk.Agent(id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := agent.Info(ctx); err != nil {
				t.Fatalf("the woken sandbox's agent: %v", err)
			}
			if op := e.waitOp(e.request(id, model.OpSuspend)); op.State != model.OpSucceeded {
				t.Fatalf("second suspend: %+v", op)
			}
			if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
				t.Fatalf("delete: %+v", op)
			}
			if ids, err := e.rt.List(ctx); err != nil || len(ids) != 0 {
				t.Fatalf("after the delete the runtime lists %v (%v)", ids, err)
			}
		})
	}
}

// suspendFault is a runtime whose Suspend fails: before anything (before
// set), or after the real suspend (after set: the checkpoint written and
// the container gone), as often as fails says (negative: always).
type suspendFault struct {
	*oci.Runtime
	before bool
	fails  atomic.Int32
}

var errInjected = errors.New("injected suspend failure")

func (s *suspendFault) Suspend(ctx context.Context, id model.SandboxID) (runtime.Snapshot, error) {
	switch n := s.fails.Load(); {
	case n == 0: // no failure left
		return s.Runtime.Suspend(ctx, id)
	case n > 0:
		s.fails.Add(-1)
	}
	if s.before {
		return runtime.Snapshot{}, errInjected
	}
	if _, err := s.Runtime.Suspend(ctx, id); err != nil {
		return runtime.Snapshot{}, err
	}
	return runtime.Snapshot{}, errInjected
}

// TestSuspendFailingAfterItsCheckpoint: a suspend that fails after its
// point of no return (the checkpoint written, the container gone) is
// retried, and the retry finishes it; one that keeps failing leaves the
// sandbox failed with the suspend's error, not running with nothing
// running; one that fails before it leaves the sandbox running.
func TestSuspendFailingAfterItsCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before      bool
		fails       int32 // -1: always
		maxAttempts int
		wantOp      model.OperationState
		wantSandbox model.SandboxState
	}{
		{"retried to the end", false, 1, 3, model.OpSucceeded, model.StateSuspended},
		{"fails for good", false, -1, 2, model.OpFailed, model.StateFailed},
		{"fails before its checkpoint", true, -1, 1, model.OpFailed, model.StateRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fault *suspendFault
			e := newEnvWrapped(t, "runc", nil, Config{MaxAttempts: tc.maxAttempts, Backoff: func(int) time.Duration { return 10 * time.Millisecond }}, func(rt *oci.Runtime) runtime.Runtime {
				fault = &suspendFault{Runtime: rt, before: tc.before}
				fault.fails.Store(tc.fails)
				return fault
			})
			e.run()
			ctx := context.Background()
			id, opID := e.create()
			if op := e.waitOp(opID); op.State != model.OpSucceeded {
				t.Fatalf("create: %+v", op)
			}
			op := e.waitOp(e.request(id, model.OpSuspend))
			sb := e.sandbox(id)
			if op.State != tc.wantOp || sb.State != tc.wantSandbox {
				t.Fatalf("suspend: operation %s (%+v), sandbox %s (%q); want %s, %s", op.State, op.Error, sb.State, sb.StateReason, tc.wantOp, tc.wantSandbox)
			}
			st, err := e.wk.Observe(ctx, id)
			alive := err == nil && st.Phase.Alive()
			switch sb.State {
			case model.StateFailed:
				if !strings.Contains(sb.StateReason, errInjected.Error()) || op.Error == nil || !strings.Contains(op.Error.Message, errInjected.Error()) {
					t.Fatalf("a suspend failed for good: reason %q, operation error %+v; want the suspend's error", sb.StateReason, op.Error)
				}
				if alive {
					t.Fatal("the sandbox failed by its suspend still runs")
				}
			case model.StateRunning:
				if !alive {
					t.Fatalf("the sandbox left running by a failed suspend is not alive: %+v, %v", st, err)
				}
			case model.StateSuspended:
				if sb.Snapshot == nil || op.Attempts != 2 {
					t.Fatalf("the finished suspend: snapshot %+v, attempts %d", sb.Snapshot, op.Attempts)
				}
			}
			// The resync agrees with what the suspend left.
			if err := e.ctrl.Resync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := e.sandbox(id); got.State != sb.State {
				t.Fatalf("after resync: %s (%s), want %s", got.State, got.StateReason, sb.State)
			}
			if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
				t.Fatalf("delete: %+v", op)
			}
		})
	}
}
