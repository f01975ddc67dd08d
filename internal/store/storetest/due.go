package storetest

import (
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func dueTests() []namedTest {
	return []namedTest{
		{"NextOperationDue", testNextOperationDue},
		{"NextOperationDuePlacement", testNextOperationDuePlacement},
	}
}

// checkDue checks NextOperationDue(owner, now): want, or none if want is
// zero.
func (e *env) checkDue(owner model.NodeID, now, want time.Time) {
	e.t.Helper()
	got, ok, err := e.s.NextOperationDue(e.ctx, owner, now)
	must(e.t, err)
	switch {
	case want.IsZero() && ok:
		e.t.Fatalf("NextOperationDue(%s, %s) = %s, want none", owner, now, got)
	case !want.IsZero() && (!ok || !got.Equal(us(want)) || got.Location() != time.UTC):
		e.t.Fatalf("NextOperationDue(%s, %s) = %s, %v; want %s", owner, now, got, ok, us(want))
	}
}

// testNextOperationDue: the next due time is the earliest not_before or
// lease expiry after now among unfinished operations; operations claimable
// now, finished ones and times already past do not count.
func testNextOperationDue(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	n1, n2 := model.NewNodeID(), model.NewNodeID()
	var none time.Time
	e.checkDue(n1, e.now(), none) // no operations at all
	_, op1 := e.sandbox(a.ID, tpl.Digest, nil)
	t0 := e.now()
	e.checkDue(n1, t0, none) // claimable at once: nothing to wait for

	// Leased: due when the lease (30 s) runs out, for its owner and others.
	if got := e.claim(n1, t0); got.ID != op1.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op1.ID)
	}
	e.checkDue(n2, t0, t0.Add(30*time.Second))
	e.checkDue(n1, t0.Add(29*time.Second), t0.Add(30*time.Second))
	e.checkDue(n2, t0.Add(30*time.Second), none) // expired: claimable, not due

	// Retried: due at its not_before, the lease being given up.
	nb1 := t0.Add(7*time.Second + 500*time.Microsecond)
	must(t, e.s.RetryOperation(e.ctx, store.Retry{OperationID: op1.ID, Owner: n1, NotBefore: nb1, Now: t0.Add(time.Second)}))
	e.checkDue(n2, t0.Add(time.Second), nb1)

	// A second sandbox's operation retried sooner comes first.
	_, op2 := e.sandbox(a.ID, tpl.Digest, nil)
	t1 := t0.Add(2 * time.Second)
	if got := e.claim(n2, t1); got.ID != op2.ID {
		t.Fatalf("claimed %s, want %s (the other is held back)", got.ID, op2.ID)
	}
	e.checkDue(n1, t1, nb1) // op2's lease runs to t1+30s, after nb1
	nb2 := t1.Add(time.Second)
	must(t, e.s.RetryOperation(e.ctx, store.Retry{OperationID: op2.ID, Owner: n2, NotBefore: nb2, Now: t1}))
	e.checkDue(n1, t1, nb2)
	e.checkDue(n1, nb2, nb1) // not_before == now: claimable, not due

	// Claimed again and finished, op2 no longer counts.
	if got := e.claim(n1, nb2); got.ID != op2.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op2.ID)
	}
	must(t, e.s.FinishOperation(e.ctx, store.Finish{OperationID: op2.ID, Owner: n1, State: model.OpSucceeded, Now: nb2}))
	e.checkDue(n1, nb2, nb1)
	if got := e.claim(n2, nb1); got.ID != op1.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op1.ID)
	}
	must(t, e.s.FinishOperation(e.ctx, store.Finish{OperationID: op1.ID, Owner: n2, State: model.OpSucceeded, Now: nb1}))
	e.checkDue(n1, nb1, none)
}

// testNextOperationDuePlacement: an operation of a sandbox placed on
// another node is not due for owner, as ClaimOperation would not give it.
func testNextOperationDuePlacement(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	here, there := model.NewNodeID(), model.NewNodeID()
	sb, op := e.sandbox(a.ID, tpl.Digest, nil)
	must(t, e.s.PlaceSandbox(e.ctx, sb.ID, there, "runsc", e.now()))
	t0 := e.now()
	if got := e.claim(there, t0); got.ID != op.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op.ID)
	}
	nb := t0.Add(5 * time.Second)
	must(t, e.s.RetryOperation(e.ctx, store.Retry{OperationID: op.ID, Owner: there, NotBefore: nb, Now: t0}))
	e.checkDue(there, t0, nb)
	e.checkDue(here, t0, time.Time{})
}
