package storetest

import (
	"errors"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func nodeFenceTests() []namedTest {
	return []namedTest{
		{"NodeTransitionOnNodeIsFenced", testTransitionOnNode},
		{"NodeDeleteOfUnplacedSandboxIsSettled", testDeleteUnplaced},
		{"NodeDeclareDeadNothingToDo", testDeclareDeadNothingToDo},
		{"NodeNeverDeclaresItselfDead", testNeverDeclaresItselfDead},
	}
}

// testTransitionOnNode: a node moves its sandbox on (recording its runtime
// once); another node, an old incarnation, a dead node and a node whose
// sandbox was placed again are refused with ErrFenced, and nothing changes.
func testTransitionOnNode(e *env) {
	t := e.t
	p, tpl := e.project(), e.template()
	home, other := e.homeNode(), e.node()
	sb, _ := e.mustCreateOn(p.ID, tpl.Digest, home)

	must(t, e.s.TransitionOnNode(e.ctx, sb.ID, e.fence(home), model.StatePending, model.StateCreating, "", "runc", e.now()))
	if got := e.getSandbox(sb.ID); got.State != model.StateCreating || got.Runtime != "runc" || got.NodeID != home {
		t.Fatalf("after the transition: %+v", got)
	}
	// The runtime is recorded once; "" leaves it.
	must(t, e.s.TransitionOnNode(e.ctx, sb.ID, e.fence(home), model.StateCreating, model.StateRunning, "", "runsc", e.now()))
	if got := e.getSandbox(sb.ID); got.State != model.StateRunning || got.Runtime != "runc" {
		t.Fatalf("a second runtime replaced the first: %+v", got)
	}
	mustIs(t, e.s.TransitionOnNode(e.ctx, sb.ID, e.fence(home), model.StateCreating, model.StateRunning, "", "", e.now()), store.ErrStateChanged)
	mustIs(t, e.s.TransitionOnNode(e.ctx, sb.ID, e.fence(home), model.StateRunning, model.StatePending, "", "", e.now()), model.ErrInvalidTransition)
	mustIs(t, e.s.TransitionOnNode(e.ctx, model.NewSandboxID(), e.fence(home), model.StateRunning, model.StateFailed, "", "", e.now()), store.ErrNotFound)

	for name, f := range map[string]store.Fence{
		"another node":        e.fence(other),
		"a made-up node":      {Node: model.NewNodeID(), Incarnation: model.NewIncarnation()},
		"a wrong incarnation": {Node: home, Incarnation: model.NewIncarnation()},
	} {
		if err := e.s.TransitionOnNode(e.ctx, sb.ID, f, model.StateRunning, model.StateFailed, "x", "", e.now()); !errors.Is(err, store.ErrFenced) {
			t.Errorf("%s: %v, want ErrFenced", name, err)
		}
	}
	old := e.restart(home)
	mustIs(t, e.s.TransitionOnNode(e.ctx, sb.ID, store.Fence{Node: home, Incarnation: old}, model.StateRunning, model.StateFailed, "x", "", e.now()), store.ErrFenced)
	if got := e.getSandbox(sb.ID); got.State != model.StateRunning {
		t.Fatalf("a fenced transition changed the sandbox: %+v", got)
	}

	// A create left unplaced by its dead node: the dead node's late
	// transition is refused, so it cannot start what waits to be placed
	// again.
	pending, _ := e.mustCreateOn(p.ID, tpl.Digest, other)
	otherFence := e.fence(other)
	e.declareDead()
	if got := e.getSandbox(pending.ID); got.NodeID != "" {
		t.Fatalf("the dead node's unstarted create is still placed: %+v", got)
	}
	err := e.s.TransitionOnNode(e.ctx, pending.ID, otherFence, model.StatePending, model.StateCreating, "", "runc", e.now())
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a dead node started an unplaced create: %v", err)
	}
	if got := e.getSandbox(pending.ID); got.State != model.StatePending || got.Runtime != "" {
		t.Fatalf("the unplaced create changed: %+v", got)
	}
}

// testDeleteUnplaced: a delete of a sandbox that has no node (its node died
// before it started) completes at the next DeclareDeadNodes: no node would
// ever claim it.
func testDeleteUnplaced(e *env) {
	t := e.t
	p, tpl := e.project(), e.template()
	doomed := e.node()
	sb, create := e.mustCreateOn(p.ID, tpl.Digest, doomed)
	e.declareDead()
	if got := e.getSandbox(sb.ID); got.NodeID != "" || got.State != model.StatePending {
		t.Fatalf("not unplaced: %+v", got)
	}
	del := e.deleteOp(sb)
	if _, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: del, Now: e.now()}); err != nil {
		t.Fatal(err)
	}
	if loss, err := e.s.DeclareDeadNodes(e.ctx, time.Hour, ""); err != nil || loss.Deleted != 1 {
		t.Fatalf("DeclareDeadNodes = %+v, %v; want the delete completed", loss, err)
	}
	if got := e.getSandbox(sb.ID); got.State != model.StateDeleted {
		t.Fatalf("the unplaced sandbox after its delete: %+v", got)
	}
	if op := e.getOp(del); op.State != model.OpSucceeded {
		t.Fatalf("its delete: %+v", op)
	}
	if op := e.getOp(create); op.State != model.OpFailed {
		t.Fatalf("its create: %+v", op)
	}
}

// testDeclareDeadNothingToDo: with every node alive and nothing to settle,
// DeclareDeadNodes changes nothing and wakes no watcher.
func testDeclareDeadNothingToDo(e *env) {
	t := e.t
	p, tpl := e.project(), e.template()
	home := e.homeNode()
	e.mustCreateOn(p.ID, tpl.Digest, home)
	ch := e.s.Watch(e.ctx)
	// The create's own notification may come late (PostgreSQL delivers it
	// through the listener): let it arrive and drain it first.
	select {
	case <-ch:
	case <-time.After(time.Second):
	}
	time.Sleep(200 * time.Millisecond)
	for len(ch) > 0 {
		<-ch
	}
	loss, err := e.s.DeclareDeadNodes(e.ctx, time.Hour, "")
	if err != nil || len(loss.Nodes) != 0 || loss.Failed+loss.Replaced+loss.Deleted != 0 {
		t.Fatalf("DeclareDeadNodes = %+v, %v; want nothing", loss, err)
	}
	select {
	case <-ch:
		t.Fatal("a DeclareDeadNodes that did nothing woke the watchers")
	case <-time.After(200 * time.Millisecond):
	}
}

// testNeverDeclaresItselfDead: the node that asks (self) is not declared
// dead however old its heartbeat (its store was slow or down, it is
// alive), and its sandboxes stay; another node, as old, is; and the
// caller's node is declared dead by another that asks. (Nodes the env
// registered before are as old and declared dead too.)
func testNeverDeclaresItselfDead(e *env) {
	t := e.t
	p, tpl := e.project(), e.template()
	self, other := e.node(), e.node()
	sb, _ := e.mustCreateOn(p.ID, tpl.Digest, self)
	time.Sleep(30 * time.Millisecond)
	loss, err := e.s.DeclareDeadNodes(e.ctx, 10*time.Millisecond, self)
	must(t, err)
	if !slices.Contains(loss.Nodes, other) || slices.Contains(loss.Nodes, self) {
		t.Fatalf("declared dead %v, want %s and not the caller %s", loss.Nodes, other, self)
	}
	if n := e.getNode(self); n.State != model.NodeActive {
		t.Fatalf("the caller's node is %s", n.State)
	}
	if got := e.getSandbox(sb.ID); got.State == model.StateFailed || got.NodeID != self {
		t.Fatalf("the caller's sandbox: %s on %q", got.State, got.NodeID)
	}
	loss, err = e.s.DeclareDeadNodes(e.ctx, 10*time.Millisecond, other)
	must(t, err)
	if !slices.Equal(loss.Nodes, []model.NodeID{self}) {
		t.Fatalf("asked by %s: declared dead %v, want %s", other, loss.Nodes, self)
	}
}
