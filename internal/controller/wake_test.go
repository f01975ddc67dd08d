package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// TestOperationLoopWakesWhenDue: with a safety poll far longer than the
// test, the operation loop still picks up an operation as soon as what held
// it back runs out — a retry's not_before, or another node's lease — because
// it asks the store when the next operation is due.
func TestOperationLoopWakesWhenDue(t *testing.T) {
	const hold = 1500 * time.Millisecond
	for _, tc := range []struct {
		name string
		// holdBack makes op unclaimable until about at.
		holdBack func(e *env, op model.OperationID, now time.Time) (at time.Time)
	}{
		{"retry not_before", func(e *env, op model.OperationID, now time.Time) time.Time {
			claimed, err := e.st.ClaimOperation(context.Background(), store.Claim{Owner: e.node, Incarnation: e.inc, Lease: time.Hour, Now: now})
			if err != nil || claimed.ID != op {
				e.t.Fatalf("claim: %+v, %v", claimed, err)
			}
			if err := e.st.RetryOperation(context.Background(), store.Retry{OperationID: op, Owner: e.node, Incarnation: e.inc, NotBefore: now.Add(hold), Now: now}); err != nil {
				e.t.Fatal(err)
			}
			return now.Add(hold)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, "runc", nil, Config{Poll: time.Hour})
			_, opID := e.create()
			due := tc.holdBack(e, opID, time.Now())
			e.run()
			op := e.waitOp(opID)
			if op.State != model.OpSucceeded {
				t.Fatalf("operation %+v, want succeeded", op)
			}
			// Claimed again (attempt 2) no earlier than due; that it
			// finished at all shows the loop woke without the poll.
			if op.Attempts != 2 {
				t.Errorf("attempts %d, want 2", op.Attempts)
			}
			if op.UpdatedAt.Before(due.Truncate(time.Microsecond)) {
				t.Errorf("finished at %s, before it was due at %s", op.UpdatedAt, due)
			}
		})
	}
}

// TestIdleWaitsUntilDue: idle sleeps until the store's next due time, never
// past the safety poll, and the whole poll when nothing is due.
func TestIdleWaitsUntilDue(t *testing.T) {
	now := time.Now().Truncate(time.Microsecond)
	for _, tc := range []struct {
		name  string
		setup func(e *env, op model.OperationID)
		want  time.Duration
	}{
		{"nothing due", func(*env, model.OperationID) {}, time.Minute},
		{"due in 3s", func(e *env, op model.OperationID) {
			if _, err := e.st.ClaimOperation(context.Background(), store.Claim{Owner: e.node, Incarnation: e.inc, Lease: 3 * time.Second, Now: now}); err != nil {
				e.t.Fatal(err)
			}
		}, 3*time.Second + time.Millisecond},
		{"due after the poll", func(e *env, op model.OperationID) {
			if _, err := e.st.ClaimOperation(context.Background(), store.Claim{Owner: e.node, Incarnation: e.inc, Lease: time.Hour, Now: now}); err != nil {
				e.t.Fatal(err)
			}
		}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, "runc", nil, Config{Poll: time.Minute, Now: func() time.Time { return now }})
			_, opID := e.create()
			tc.setup(e, opID)
			if got := e.ctrl.idle(context.Background()); got != tc.want {
				t.Fatalf("idle = %v, want %v", got, tc.want)
			}
		})
	}
}

// claimCounter counts the claims of an operation loop.
type claimCounter struct {
	store.Store
	claims atomic.Int32
}

func (c *claimCounter) ClaimOperation(ctx context.Context, cl store.Claim) (model.Operation, error) {
	c.claims.Add(1)
	return c.Store.ClaimOperation(ctx, cl)
}

// TestOperationLoopWakesForItsNode: creates placed on another node do not
// wake this node's idle operation loop (no claim); one placed here does.
func TestOperationLoopWakesForItsNode(t *testing.T) {
	e := newEnvWith(t, "runc", nil, Config{})
	cs := &claimCounter{Store: e.st}
	ctrl, err := New(Config{Store: cs, Workers: e.ctrl.cfg.Workers, NodeID: e.node, Incarnation: e.inc, Poll: time.Hour, Logger: e.ctrl.log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrl.operationLoop(ctx)
	}()
	defer func() { cancel(); <-done }()
	time.Sleep(200 * time.Millisecond) // idle after its first claim
	idle := cs.claims.Load()
	other := model.NewNodeID()
	if _, err := e.st.RegisterNode(ctx, model.Node{ID: other, Incarnation: model.NewIncarnation(), Role: model.RoleAll, AdvertiseURL: "http://127.0.0.2:1"}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		now := time.Now()
		sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: e.project, Template: e.digest, Resources: model.Resources{CPUs: 1, MemoryMiB: 256},
			State: model.StatePending, NodeID: other, CreatedAt: now, UpdatedAt: now}
		op := model.Operation{ID: model.NewOperationID(), ProjectID: e.project, SandboxID: sb.ID, Kind: model.OpCreate,
			State: model.OpPending, CreatedAt: now, UpdatedAt: now}
		if err := e.st.CreateSandbox(ctx, sb, policy.Spec{}, op, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := cs.claims.Load(); n != idle {
		t.Fatalf("creates on another node made this node's loop claim %d times", n-idle)
	}
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create here: %+v", op)
	}
	if n := cs.claims.Load(); n <= idle {
		t.Fatal("the create here was run without a claim")
	}
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
}
