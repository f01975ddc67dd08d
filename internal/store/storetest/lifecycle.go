package storetest

import (
	"errors"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func lifecycleTests() []namedTest {
	return []namedTest{
		{"TransitionSandbox", testTransitionSandbox},
		{"RequestDeleteCancelsPendingCreate", testRequestDeleteCancelsPending},
		{"RequestDeleteLeavesRunningCreate", testRequestDeleteLeavesRunning},
		{"RequestDeleteRefusals", testRequestDeleteRefusals},
		{"RequestDeleteAgainAfterFailedDelete", testRequestDeleteAgain},
	}
}

func testTransitionSandbox(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
	at := e.now()
	must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateCreating, "placing", at))
	want := sb
	want.State, want.StateReason, want.UpdatedAt = model.StateCreating, "placing", at
	checkSandbox(t, e.getSandbox(sb.ID), want)

	for _, tc := range []struct {
		name     string
		id       model.SandboxID
		from, to model.SandboxState
		err      error
	}{
		{"stale from", sb.ID, model.StatePending, model.StateFailed, store.ErrStateChanged},
		{"forbidden by the state machine", sb.ID, model.StateCreating, model.StatePaused, model.ErrInvalidTransition},
		{"forbidden and stale", sb.ID, model.StatePending, model.StateRunning, model.ErrInvalidTransition},
		{"from deleted", sb.ID, model.StateDeleted, model.StateDeleting, model.ErrInvalidTransition},
		{"to itself", sb.ID, model.StateCreating, model.StateCreating, model.ErrInvalidTransition},
		{"unknown sandbox", model.NewSandboxID(), model.StatePending, model.StateCreating, store.ErrNotFound},
	} {
		err := e.s.TransitionSandbox(e.ctx, tc.id, tc.from, tc.to, "nope", e.now())
		if !errors.Is(err, tc.err) {
			t.Fatalf("%s: error %v, want %v", tc.name, err, tc.err)
		}
		checkSandbox(t, e.getSandbox(sb.ID), want) // nothing written
	}

	// A reason is replaced by the next transition's.
	at = e.now()
	must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StateCreating, model.StateFailed, "image missing", at))
	want.State, want.StateReason, want.UpdatedAt = model.StateFailed, "image missing", at
	checkSandbox(t, e.getSandbox(sb.ID), want)
}

func testRequestDeleteCancelsPending(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	sb, create := e.sandbox(a.ID, tpl.Digest, nil)
	del := e.deleteOp(sb)
	rec := e.idem(a.ID, "delete-1")
	at := e.now()
	got, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: del, Idempotency: rec, Now: at})
	must(t, err)
	want := sb
	want.State, want.UpdatedAt = model.StateDeleting, at
	checkSandbox(t, got, want)
	checkSandbox(t, e.getSandbox(sb.ID), want)

	cancelled := create
	cancelled.State = model.OpFailed
	cancelled.Error = &model.OperationError{Code: "cancelled", Message: "superseded by delete"}
	cancelled.UpdatedAt, cancelled.FinishedAt = at, &at
	checkOperation(t, e.getOp(create), cancelled)
	checkOperation(t, e.getOp(del), del)
	stored, err := e.s.GetIdempotency(e.ctx, a.ID, rec.KeyHash)
	must(t, err)
	checkIdem(t, stored, rec)

	// The delete op is now the sandbox's only unfinished op, so it is claimable.
	claimed := e.claim(e.homeNode(), e.now())
	if claimed.ID != del.ID {
		t.Fatalf("claimed %s, want the delete op %s", claimed.ID, del.ID)
	}
}

func testRequestDeleteLeavesRunning(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()
	sb, create := e.sandbox(a.ID, tpl.Digest, nil)
	running := e.claim(node, e.now())
	if running.ID != create.ID {
		t.Fatalf("claimed %s, want %s", running.ID, create.ID)
	}
	must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateCreating, "", e.now()))
	del := e.deleteOp(sb)
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: del, Now: e.now()})
	must(t, err)
	checkOperation(t, e.getOp(create), running) // the controller finishes it

	// The delete waits behind the running create, even for another node.
	e.noWork(node, e.now())
	e.noWork(e.node(), e.now())
	// The create's sandbox transition now finds the sandbox deleting.
	err = e.finish(store.Finish{OperationID: create.ID, Owner: node, State: model.OpSucceeded,
		SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: e.now()})
	mustIs(t, err, store.ErrStateChanged)
	if op := e.getOp(create); op.State != model.OpRunning {
		t.Fatalf("refused finish changed the op: %+v", op)
	}
	must(t, e.finish(store.Finish{OperationID: create.ID, Owner: node, State: model.OpFailed,
		Error: &model.OperationError{Code: "cancelled", Message: "sandbox is being deleted"}, Now: e.now()}))
	if got := e.claim(node, e.now()); got.ID != del.ID {
		t.Fatalf("claimed %s, want the delete op %s", got.ID, del.ID)
	}
}

func testRequestDeleteRefusals(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	tpl := e.template()
	sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
	first := e.idem(a.ID, "delete-1")
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Idempotency: first, Now: e.now()})
	must(t, err)
	before := e.getSandbox(sb.ID)
	unfinished := func() int {
		ops, err := e.s.ListUnfinishedOperations(e.ctx)
		must(t, err)
		return len(ops)
	}
	n := unfinished()

	otherProject := e.deleteOp(sb)
	otherProject.ProjectID = b.ID
	wrongKind := e.deleteOp(sb)
	wrongKind.Kind = model.OpCreate
	for _, tc := range []struct {
		name    string
		project model.ProjectID
		op      model.Operation
		key     string
		err     error
	}{
		{"already deleting", a.ID, e.deleteOp(sb), "delete-2", model.ErrInvalidTransition},
		{"another project's sandbox", b.ID, otherProject, "delete-3", store.ErrNotFound},
		{"wrong op kind", a.ID, wrongKind, "delete-4", model.ErrInvalid},
		{"unknown sandbox", a.ID, func() model.Operation { o := e.deleteOp(sb); o.SandboxID = model.NewSandboxID(); return o }(), "delete-5", nil},
	} {
		id := tc.op.SandboxID
		rec := e.idem(tc.project, tc.key)
		_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: tc.project, SandboxID: id, Operation: tc.op, Idempotency: rec, Now: e.now()})
		want := tc.err
		if want == nil {
			want = store.ErrNotFound
		}
		if !errors.Is(err, want) {
			t.Fatalf("%s: error %v, want %v", tc.name, err, want)
		}
		_, err = e.s.GetIdempotency(e.ctx, tc.project, rec.KeyHash)
		mustIs(t, err, store.ErrNotFound)
		_, err = e.s.GetOperation(e.ctx, tc.op.ProjectID, tc.op.ID)
		mustIs(t, err, store.ErrNotFound)
	}
	// Replaying the first key conflicts with the first record, even though the
	// sandbox could no longer be deleted.
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Idempotency: e.idem(a.ID, "delete-1"), Now: e.now()})
	conflict(t, err, first)
	checkSandbox(t, e.getSandbox(sb.ID), before)
	if got := unfinished(); got != n {
		t.Fatalf("refused deletes changed the unfinished operations: %d, want %d", got, n)
	}

	// Deleted is terminal.
	must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StateDeleting, model.StateDeleted, "", e.now()))
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Now: e.now()})
	mustIs(t, err, model.ErrInvalidTransition)
}

// testRequestDeleteAgain: a delete whose operation failed can be requested
// again, which queues a new delete operation and leaves the sandbox deleting.
func testRequestDeleteAgain(e *env) {
	t := e.t
	p := e.project()
	sb, _ := e.sandbox(p.ID, e.template().Digest, nil)
	first := e.deleteOp(sb)
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: first, Now: e.now()})
	must(t, err)
	node := e.homeNode()
	claimed := e.claim(node, e.now())
	if claimed.ID != first.ID {
		t.Fatalf("claimed %s, want the delete %s", claimed.ID, first.ID)
	}
	must(t, e.finish(store.Finish{OperationID: first.ID, Owner: node, State: model.OpFailed,
		Error: &model.OperationError{Code: "runtime_error", Message: "boom"}, Now: e.now()}))

	second := e.deleteOp(sb)
	got, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: second, Now: e.now()})
	must(t, err)
	if got.State != model.StateDeleting {
		t.Fatalf("sandbox is %s after a repeated delete", got.State)
	}
	if op := e.getOp(second); op.State != model.OpPending || op.Kind != model.OpDelete {
		t.Fatalf("new delete operation: %+v", op)
	}
	// While that one is unfinished, a third is refused.
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Now: e.now()})
	mustIs(t, err, model.ErrInvalidTransition)
}
