package storetest

import (
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
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
// lease expiry after now among unfinished operations of sandboxes on the
// owner; operations claimable now, finished ones, times already past and
// other nodes' operations do not count.
func testNextOperationDue(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node, other := e.homeNode(), e.node()
	var none time.Time
	e.checkDue(node, e.now(), none) // no operations at all
	_, op1 := e.sandbox(a.ID, tpl.Digest, nil)
	t0 := e.now()
	e.checkDue(node, t0, none) // claimable at once: nothing to wait for

	// Leased: due for its node when the lease (30 s) runs out; never for
	// another node, which could not claim it.
	if got := e.claim(node, t0); got.ID != op1.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op1.ID)
	}
	e.checkDue(node, t0, t0.Add(30*time.Second))
	e.checkDue(node, t0.Add(29*time.Second), t0.Add(30*time.Second))
	e.checkDue(other, t0, none)
	e.checkDue(node, t0.Add(30*time.Second), none) // expired: claimable, not due

	// Retried: due at its not_before, the lease being given up.
	nb1 := t0.Add(7*time.Second + 500*time.Microsecond)
	must(t, e.retry(store.Retry{OperationID: op1.ID, Owner: node, NotBefore: nb1, Now: t0.Add(time.Second)}))
	e.checkDue(node, t0.Add(time.Second), nb1)

	// A second sandbox's operation retried sooner comes first.
	_, op2 := e.sandbox(a.ID, tpl.Digest, nil)
	t1 := t0.Add(2 * time.Second)
	if got := e.claim(node, t1); got.ID != op2.ID {
		t.Fatalf("claimed %s, want %s (the other is held back)", got.ID, op2.ID)
	}
	e.checkDue(node, t1, nb1) // op2's lease runs to t1+30s, after nb1
	nb2 := t1.Add(time.Second)
	must(t, e.retry(store.Retry{OperationID: op2.ID, Owner: node, NotBefore: nb2, Now: t1}))
	e.checkDue(node, t1, nb2)
	e.checkDue(node, nb2, nb1) // not_before == now: claimable, not due

	// Claimed again and finished, op2 no longer counts.
	if got := e.claim(node, nb2); got.ID != op2.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op2.ID)
	}
	must(t, e.finish(store.Finish{OperationID: op2.ID, Owner: node, State: model.OpSucceeded, Now: nb2}))
	e.checkDue(node, nb2, nb1)
	if got := e.claim(node, nb1); got.ID != op1.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op1.ID)
	}
	must(t, e.finish(store.Finish{OperationID: op1.ID, Owner: node, State: model.OpSucceeded, Now: nb1}))
	e.checkDue(node, nb1, none)
}

// testNextOperationDuePlacement: an operation of a sandbox placed on
// another node, or on no node yet, is not due for owner, as ClaimOperation
// would not give it.
func testNextOperationDuePlacement(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	here, there := e.node(), e.node()
	sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
	sb.NodeID = there
	must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
	t0 := e.now()
	if got := e.claim(there, t0); got.ID != op.ID {
		t.Fatalf("claimed %s, want %s", got.ID, op.ID)
	}
	nb := t0.Add(5 * time.Second)
	must(t, e.retry(store.Retry{OperationID: op.ID, Owner: there, NotBefore: nb, Now: t0}))
	e.checkDue(there, t0, nb)
	e.checkDue(here, t0, time.Time{})

	// An unplaced create is nobody's, however due.
	unplaced, uop := e.newSandbox(a.ID, tpl.Digest, nil)
	unplaced.NodeID = ""
	uop.NotBefore = t0.Add(time.Second)
	must(t, e.s.CreateSandbox(e.ctx, unplaced, policy.Spec{}, uop, nil))
	e.checkDue(here, t0, time.Time{})
	e.checkDue(there, t0, nb)
}
