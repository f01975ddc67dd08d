package controller

import (
	"context"
	"testing"
	"time"

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
