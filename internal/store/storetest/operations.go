package storetest

import (
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func operationTests() []namedTest {
	return []namedTest{
		{"ClaimOrder", testClaimOrder},
		{"ClaimSerializesPerSandbox", testClaimSerializesPerSandbox},
		{"ClaimPlacementFilter", testClaimPlacement},
		{"LeaseExpiryAndRenewal", testLeaseExpiry},
		{"FinishOperation", testFinishOperation},
		{"ReleaseLeases", testReleaseLeases},
		{"ListUnfinishedOperations", testListUnfinished},
		{"ClaimArgumentErrors", testClaimArgs},
		{"RetryNotBefore", testRetryNotBefore},
		{"RetryBlocksLaterOperations", testRetryBlocksLater},
		{"RetryErrors", testRetryErrors},
		{"OperationKindsFromLifecycleTable", testOperationKinds},
	}
}

func testClaimOrder(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()
	e.noWork(node, e.now())
	var ops []model.Operation
	for i := 0; i < 3; i++ {
		_, op := e.sandbox(a.ID, tpl.Digest, nil)
		ops = append(ops, op)
	}
	// Equal created_at: the smaller ID goes first.
	same := e.now()
	var tied []model.Operation
	for i := 0; i < 2; i++ {
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		sb.CreatedAt, op.CreatedAt = same, same
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		tied = append(tied, op)
	}
	if tied[1].ID < tied[0].ID {
		tied[0], tied[1] = tied[1], tied[0]
	}
	ops = append(ops, tied...)
	for _, want := range ops {
		now := e.now()
		got := e.claim(node, now)
		want.State, want.Attempts, want.UpdatedAt = model.OpRunning, 1, now
		checkOperation(t, got, want)
		checkOperation(t, e.getOp(want), want)
	}
	e.noWork(node, e.now())
}

func testClaimSerializesPerSandbox(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()
	s1, c1 := e.sandbox(a.ID, tpl.Digest, nil)
	_, c2 := e.sandbox(a.ID, tpl.Digest, nil)
	if got := e.claim(node, e.now()); got.ID != c1.ID {
		t.Fatalf("claimed %s, want %s", got.ID, c1.ID)
	}
	must(t, e.s.TransitionSandbox(e.ctx, s1.ID, model.StatePending, model.StateCreating, "", e.now()))
	d1 := e.deleteOp(s1)
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: s1.ID, Operation: d1, Now: e.now()})
	must(t, err)
	// s1's delete is older than nothing but waits for s1's running create;
	// s2's create is free.
	if got := e.claim(node, e.now()); got.ID != c2.ID {
		t.Fatalf("claimed %s, want s2's create %s (s1's delete must wait)", got.ID, c2.ID)
	}
	e.noWork(node, e.now())
	must(t, e.finish(store.Finish{OperationID: c1.ID, Owner: node, State: model.OpSucceeded, Now: e.now()}))
	if got := e.claim(node, e.now()); got.ID != d1.ID {
		t.Fatalf("claimed %s, want s1's delete %s", got.ID, d1.ID)
	}
}

// testClaimPlacement: a node claims the operations of the sandboxes placed
// on it, not another node's nor an unplaced sandbox's (until it is assigned
// a node).
func testClaimPlacement(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	here, there := e.node(), e.node()
	on := func(node model.NodeID) (model.Sandbox, model.Operation) {
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		sb.NodeID = node
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		return sb, op
	}
	_, remoteOp := on(there)
	_, localOp := on(here)
	free, freeOp := on("")

	if got := e.claim(here, e.now()); got.ID != localOp.ID {
		t.Fatalf("claimed %s, want the op of the sandbox placed here %s", got.ID, localOp.ID)
	}
	e.noWork(here, e.now()) // the remote sandbox's op is not ours, the unplaced one nobody's
	if got := e.claim(there, e.now()); got.ID != remoteOp.ID {
		t.Fatalf("claimed %s, want %s", got.ID, remoteOp.ID)
	}
	e.noWork(there, e.now())
	must(t, e.s.AssignNode(e.ctx, free.ID, here))
	e.noWork(there, e.now())
	if got := e.claim(here, e.now()); got.ID != freeOp.ID {
		t.Fatalf("claimed %s, want the op of the sandbox assigned here %s", got.ID, freeOp.ID)
	}
}

// testLeaseExpiry: a lease runs out unless renewed; an expired lease is
// taken over (here by the node's next incarnation, as after a restart) and
// the former holder can neither renew nor finish it.
func testLeaseExpiry(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()
	_, op := e.sandbox(a.ID, tpl.Digest, nil)
	t0 := e.now()
	lease := 30 * time.Second
	inc1 := e.inc(node)
	claim := func(inc model.Incarnation, at time.Time) store.Claim {
		return store.Claim{Owner: node, Incarnation: inc, Lease: lease, Now: at}
	}

	first, err := e.s.ClaimOperation(e.ctx, claim(inc1, t0))
	must(t, err)
	if first.ID != op.ID || first.Attempts != 1 {
		t.Fatalf("first claim = %+v", first)
	}
	e.noWork(node, t0.Add(lease-time.Microsecond)) // still leased
	must(t, e.s.RenewLease(e.ctx, op.ID, claim(inc1, t0.Add(20*time.Second))))
	e.noWork(node, t0.Add(lease+time.Second)) // renewal moved the expiry to t0+50s

	// The node restarts: its new incarnation waits for the lease too.
	e.restart(node)
	inc2 := e.inc(node)
	e.noWork(node, t0.Add(lease+time.Second))
	// Expired: the new incarnation takes it over, attempts count up.
	t1 := t0.Add(50 * time.Second)
	second, err := e.s.ClaimOperation(e.ctx, claim(inc2, t1))
	must(t, err)
	if second.ID != op.ID || second.Attempts != 2 || second.State != model.OpRunning || !second.UpdatedAt.Equal(us(t1)) {
		t.Fatalf("reclaim = %+v", second)
	}
	// The first holder lost it.
	mustIs(t, e.s.RenewLease(e.ctx, op.ID, claim(inc1, t1)), store.ErrLeaseLost)
	mustIs(t, e.finish(store.Finish{OperationID: op.ID, Owner: node, Incarnation: inc1, State: model.OpSucceeded, Now: t1}), store.ErrLeaseLost)
	if got := e.getOp(op); got.State != model.OpRunning || got.Attempts != 2 {
		t.Fatalf("lost-lease calls changed the op: %+v", got)
	}
	must(t, e.s.RenewLease(e.ctx, op.ID, claim(inc2, t1.Add(time.Second))))
	must(t, e.finish(store.Finish{OperationID: op.ID, Owner: node, State: model.OpSucceeded, Now: t1.Add(2 * time.Second)}))
	// Finished: nobody holds it any more, nobody can claim it.
	mustIs(t, e.s.RenewLease(e.ctx, op.ID, claim(inc2, t1.Add(3*time.Second))), store.ErrLeaseLost)
	mustIs(t, e.finish(store.Finish{OperationID: op.ID, Owner: node, State: model.OpFailed, Now: t1}), store.ErrLeaseLost)
	e.noWork(node, t1.Add(time.Hour))
	mustIs(t, e.s.RenewLease(e.ctx, model.NewOperationID(), claim(inc2, t1)), store.ErrNotFound)
	mustIs(t, e.finish(store.Finish{OperationID: model.NewOperationID(), Owner: node, State: model.OpFailed, Now: t1}), store.ErrNotFound)
}

func testFinishOperation(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()
	type result struct {
		err     error
		opState model.OperationState // after; "" = still running
		sbState model.SandboxState
	}
	for _, tc := range []struct {
		name string
		f    store.Finish
		want result
	}{
		{"success moves the sandbox", store.Finish{State: model.OpSucceeded, SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, SandboxReason: "up"},
			result{nil, model.OpSucceeded, model.StateRunning}},
		{"failure with error", store.Finish{State: model.OpFailed, Error: &model.OperationError{Code: "runtime_error", Message: "runc exited 1"},
			SandboxFrom: model.StateCreating, SandboxTo: model.StateFailed, SandboxReason: "runc exited 1"},
			result{nil, model.OpFailed, model.StateFailed}},
		{"sandbox left alone", store.Finish{State: model.OpSucceeded}, result{nil, model.OpSucceeded, model.StateCreating}},
		{"stale sandbox state", store.Finish{State: model.OpSucceeded, SandboxFrom: model.StatePending, SandboxTo: model.StateCreating},
			result{store.ErrStateChanged, "", model.StateCreating}},
		{"forbidden transition", store.Finish{State: model.OpSucceeded, SandboxFrom: model.StateCreating, SandboxTo: model.StatePaused},
			result{model.ErrInvalidTransition, "", model.StateCreating}},
		{"not a final state", store.Finish{State: model.OpRunning}, result{model.ErrInvalid, "", model.StateCreating}},
	} {
		sb, op := e.sandbox(a.ID, tpl.Digest, nil)
		claimed := e.claim(node, e.now())
		if claimed.ID != op.ID {
			t.Fatalf("%s: claimed %s, want %s", tc.name, claimed.ID, op.ID)
		}
		must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateCreating, "", e.now()))
		before := e.getSandbox(sb.ID)
		f := tc.f
		f.OperationID, f.Owner, f.Now = op.ID, node, e.now()
		err := e.finish(f)
		if tc.want.err != nil {
			if !errors.Is(err, tc.want.err) {
				t.Fatalf("%s: error %v, want %v", tc.name, err, tc.want.err)
			}
			checkOperation(t, e.getOp(op), claimed)
			checkSandbox(t, e.getSandbox(sb.ID), before)
			// Leave nothing running for the next case.
			must(t, e.finish(store.Finish{OperationID: op.ID, Owner: node, State: model.OpFailed, Now: e.now()}))
			continue
		}
		must(t, err)
		want := claimed
		want.State, want.Error, want.UpdatedAt, want.FinishedAt = tc.want.opState, tc.f.Error, f.Now, &f.Now
		checkOperation(t, e.getOp(op), want)
		wantSb := before
		if tc.f.SandboxTo != "" {
			wantSb.State, wantSb.StateReason, wantSb.UpdatedAt = tc.want.sbState, tc.f.SandboxReason, f.Now
		}
		checkSandbox(t, e.getSandbox(sb.ID), wantSb)
	}
}

func testReleaseLeases(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	crashed, other := e.node(), e.node()
	on := func(node model.NodeID) model.Operation {
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		sb.NodeID = node
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		return op
	}
	op1, op2, op3 := on(crashed), on(crashed), on(other)
	now := e.now()
	e.claim(crashed, now)
	e.claim(crashed, now)
	e.claim(other, now)
	e.noWork(other, now)
	// The crashed node starts again (a new incarnation) and releases what
	// its last run held.
	e.restart(crashed)
	e.noWork(crashed, now)
	n, err := e.s.ReleaseLeases(e.ctx, crashed, now)
	must(t, err)
	if n != 2 {
		t.Fatalf("ReleaseLeases = %d, want 2", n)
	}
	// Released leases are claimable at once; other leases stay.
	e.noWork(other, now)
	got1, got2 := e.claim(crashed, now), e.claim(crashed, now)
	if got1.ID != op1.ID || got2.ID != op2.ID || got1.Attempts != 2 || got2.Attempts != 2 {
		t.Fatalf("after release claimed %+v and %+v, want op1 and op2 at attempt 2", got1, got2)
	}
	e.noWork(crashed, now)
	if n, err := e.s.ReleaseLeases(e.ctx, model.NewNodeID(), now); err != nil || n != 0 {
		t.Fatalf("ReleaseLeases of an owner without leases = %d, %v", n, err)
	}
	if got := e.getOp(op3); got.State != model.OpRunning || got.Attempts != 1 {
		t.Fatalf("another owner's op changed: %+v", got)
	}
}

func testListUnfinished(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	tpl := e.template()
	node := e.homeNode()
	_, o1 := e.sandbox(a.ID, tpl.Digest, nil)
	_, o2 := e.sandbox(b.ID, tpl.Digest, nil)
	_, o3 := e.sandbox(a.ID, tpl.Digest, nil)
	c := e.claim(node, e.now())
	must(t, e.finish(store.Finish{OperationID: c.ID, Owner: node, State: model.OpSucceeded, Now: e.now()}))
	running := e.claim(node, e.now())
	ops, err := e.s.ListUnfinishedOperations(e.ctx)
	must(t, err)
	if len(ops) != 2 || ops[0].ID != o2.ID || ops[1].ID != o3.ID {
		t.Fatalf("ListUnfinishedOperations = %+v, want [o2 o3] (o1 %s finished)", ops, o1.ID)
	}
	checkOperation(t, ops[0], running)
	checkOperation(t, ops[1], o3)
}

func testClaimArgs(e *env) {
	node := e.node()
	for _, c := range []store.Claim{
		{Owner: "", Incarnation: e.inc(node), Lease: time.Second, Now: e.now()},
		{Owner: node, Incarnation: e.inc(node), Lease: 0, Now: e.now()},
		{Owner: node, Lease: time.Second, Now: e.now()}, // no incarnation
	} {
		_, err := e.s.ClaimOperation(e.ctx, c)
		mustIs(e.t, err, model.ErrInvalid)
	}
}

// testRetryNotBefore: a retried operation gives up its lease and is not
// claimable before its NotBefore, not even by its node; at NotBefore it is
// (by its node only).
func testRetryNotBefore(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	n1, n2 := e.homeNode(), e.node()
	_, op := e.sandbox(a.ID, tpl.Digest, nil)
	t0 := e.now()
	claimed := e.claim(n1, t0)
	if claimed.ID != op.ID || !claimed.NotBefore.IsZero() {
		t.Fatalf("claimed %+v, want %s with no NotBefore", claimed, op.ID)
	}
	// The backoff is shorter than the lease: only NotBefore holds it back.
	retryAt, notBefore := t0.Add(time.Second), t0.Add(7*time.Second+500*time.Microsecond)
	must(t, e.retry(store.Retry{OperationID: op.ID, Owner: n1, NotBefore: notBefore, Now: retryAt}))
	want := claimed
	want.NotBefore, want.UpdatedAt = us(notBefore), retryAt
	checkOperation(t, e.getOp(op), want)

	// The lease is given up: its former owner can neither renew nor finish it.
	mustIs(t, e.s.RenewLease(e.ctx, op.ID, store.Claim{Owner: n1, Incarnation: e.inc(n1), Lease: time.Minute, Now: retryAt}), store.ErrLeaseLost)
	mustIs(t, e.finish(store.Finish{OperationID: op.ID, Owner: n1, State: model.OpSucceeded, Now: retryAt}), store.ErrLeaseLost)
	for _, at := range []time.Time{retryAt, notBefore.Add(-time.Microsecond)} {
		e.noWork(n1, at)
		e.noWork(n2, at)
	}
	e.noWork(n2, notBefore) // another node's, due or not
	got := e.claim(n1, notBefore)
	if got.ID != op.ID || got.Attempts != 2 || got.State != model.OpRunning || !got.NotBefore.Equal(us(notBefore)) {
		t.Fatalf("claim at NotBefore = %+v, want %s at attempt 2", got, op.ID)
	}
	// Claimed again, it is leased as usual.
	e.noWork(n1, notBefore.Add(time.Second))
	must(t, e.finish(store.Finish{OperationID: op.ID, Owner: n1, State: model.OpSucceeded, Now: notBefore.Add(time.Second)}))
}

// testRetryBlocksLater: while a retried operation waits for its NotBefore,
// later operations of its sandbox wait too (it is still unfinished); other
// sandboxes' operations do not.
func testRetryBlocksLater(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()
	sb, create := e.sandbox(a.ID, tpl.Digest, nil)
	t0 := e.now()
	e.claim(node, t0)
	notBefore := t0.Add(time.Hour)
	must(t, e.retry(store.Retry{OperationID: create.ID, Owner: node, NotBefore: notBefore, Now: t0}))
	del := e.deleteOp(sb)
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: del, Now: e.now()})
	must(t, err)
	if got := e.getOp(create); got.State != model.OpRunning {
		t.Fatalf("a delete cancelled the retried (running) create: %+v", got)
	}
	_, other := e.sandbox(a.ID, tpl.Digest, nil)
	if got := e.claim(node, e.now()); got.ID != other.ID {
		t.Fatalf("claimed %s, want the other sandbox's create %s", got.ID, other.ID)
	}
	e.noWork(node, e.now())
	if got := e.claim(node, notBefore); got.ID != create.ID {
		t.Fatalf("claimed %s at NotBefore, want the retried create %s", got.ID, create.ID)
	}
	must(t, e.finish(store.Finish{OperationID: create.ID, Owner: node, State: model.OpFailed, Now: notBefore}))
	if got := e.claim(node, notBefore); got.ID != del.ID {
		t.Fatalf("claimed %s, want the delete %s", got.ID, del.ID)
	}
}

func testRetryErrors(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	owner, other := e.homeNode(), e.node()
	_, op := e.sandbox(a.ID, tpl.Digest, nil)
	now := e.now()
	// Pending, not leased by anyone yet.
	mustIs(t, e.retry(store.Retry{OperationID: op.ID, Owner: owner, NotBefore: now, Now: now}), store.ErrLeaseLost)
	e.claim(owner, now)
	before := e.getOp(op)
	for _, tc := range []struct {
		name string
		r    store.Retry
		want error
	}{
		{"another owner", store.Retry{OperationID: op.ID, Owner: other, NotBefore: now.Add(time.Minute), Now: now}, store.ErrLeaseLost},
		{"another incarnation", store.Retry{OperationID: op.ID, Owner: owner, Incarnation: model.NewIncarnation(), NotBefore: now.Add(time.Minute), Now: now}, store.ErrLeaseLost},
		{"no owner", store.Retry{OperationID: op.ID, NotBefore: now.Add(time.Minute), Now: now}, model.ErrInvalid},
		{"unknown operation", store.Retry{OperationID: model.NewOperationID(), Owner: owner, NotBefore: now, Now: now}, store.ErrNotFound},
	} {
		err := e.retry(tc.r)
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: RetryOperation = %v, want %v", tc.name, err, tc.want)
		}
		checkOperation(t, e.getOp(op), before)
	}
	must(t, e.finish(store.Finish{OperationID: op.ID, Owner: owner, State: model.OpSucceeded, Now: e.now()}))
	mustIs(t, e.retry(store.Retry{OperationID: op.ID, Owner: owner, NotBefore: now, Now: e.now()}), store.ErrLeaseLost)
}

// testOperationKinds: the store accepts the kinds of the lifecycle table and
// refuses others, whichever request carries them.
func testOperationKinds(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	for _, kind := range []model.OperationKind{"", "bogus", "Create", model.OpDelete} {
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		op.Kind = kind
		mustIs(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil), model.ErrInvalid)
	}
	sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
	for _, kind := range []model.OperationKind{"bogus", model.OpCreate} {
		op := e.deleteOp(sb)
		op.Kind = kind
		_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: op, Now: e.now()})
		mustIs(t, err, model.ErrInvalid)
	}
	// Every kind a store hands out is one of the table's.
	del := e.deleteOp(sb)
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: del, Now: e.now()})
	must(t, err)
	ops, err := e.s.ListUnfinishedOperations(e.ctx)
	must(t, err)
	for _, op := range ops {
		if err := op.Kind.Validate(); err != nil {
			t.Fatalf("store returned %+v: %v", op, err)
		}
	}
}
