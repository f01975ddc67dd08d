package storetest

import (
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func nodeTests() []namedTest {
	return []namedTest{
		{"NodeRegister", testNodeRegister},
		{"NodeRegisterErrors", testNodeRegisterErrors},
		{"NodeReregisterFencesOldIncarnation", testNodeReregisterFences},
		{"NodeReregisterKeepsOperatorState", testNodeReregisterStates},
		{"NodeHeartbeat", testNodeHeartbeat},
		{"NodeDeclareDead", testNodeDeclareDead},
		{"NodeSetState", testNodeSetState},
		{"NodeRoom", testNodeRoom},
		{"NodeRoomFreedByEndedSandboxes", testNodeRoomFreed},
		{"NodeAssign", testNodeAssign},
		{"NodePidsBudget", testNodePidsBudget},
		{"NodeUsageAndHeartbeatAge", testNodeUsage},
		{"NodeTemplates", testNodeTemplates},
		{"NodeListUnplaced", testNodeListUnplaced},
		{"NodeConcurrentPlacement", testNodeConcurrentPlacement},
		{"NodeLossRacesDeletes", testNodeLossRacesDeletes},
		{"NodeSelectorRoundTrip", testNodeSelector},
		{"NodeDutyLease", testDutyLease},
	}
}

// clockSlack bounds how far the database's clock may be from this
// process's: the database runs on this machine.
const clockSlack = 5 * time.Second

// near fails unless got is within clockSlack of want.
func (e *env) near(what string, got, want time.Time) {
	e.t.Helper()
	if d := got.Sub(want); d > clockSlack || d < -clockSlack {
		e.t.Fatalf("%s = %s, %s away from %s", what, got, d, want)
	}
}

// createOn builds a sandbox placed on node ("": unplaced), lets edit change
// it, and creates it with an idempotency record.
func (e *env) createOn(p model.ProjectID, tpl model.TemplateDigest, node model.NodeID, edit func(*model.Sandbox)) (model.Sandbox, model.Operation, error) {
	sb, op := e.newSandbox(p, tpl, nil)
	sb.NodeID = node
	if edit != nil {
		edit(&sb)
	}
	rec := e.idem(p, string(sb.ID))
	err := e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, rec)
	if err != nil {
		// Nothing of a refused create is written.
		if _, gerr := e.s.GetSandboxByID(e.ctx, sb.ID); !errors.Is(gerr, store.ErrNotFound) {
			e.t.Fatalf("refused create (%v) left the sandbox: %v", err, gerr)
		}
		if _, gerr := e.s.GetOperation(e.ctx, p, op.ID); !errors.Is(gerr, store.ErrNotFound) {
			e.t.Fatalf("refused create (%v) left the operation: %v", err, gerr)
		}
		if _, gerr := e.s.GetIdempotency(e.ctx, p, rec.KeyHash); !errors.Is(gerr, store.ErrNotFound) {
			e.t.Fatalf("refused create (%v) left the idempotency record: %v", err, gerr)
		}
	}
	return sb, op, err
}

// mustCreateOn is createOn that fails on error.
func (e *env) mustCreateOn(p model.ProjectID, tpl model.TemplateDigest, node model.NodeID) (model.Sandbox, model.Operation) {
	e.t.Helper()
	sb, op, err := e.createOn(p, tpl, node, nil)
	if err != nil {
		e.t.Fatalf("CreateSandbox on %q: %v", node, err)
	}
	return sb, op
}

func (e *env) getNode(id model.NodeID) model.NodeStatus {
	e.t.Helper()
	n, err := e.s.GetNode(e.ctx, id)
	if err != nil {
		e.t.Fatalf("GetNode %s: %v", id, err)
	}
	return n
}

// declareDead lets the heartbeats of every node registered so far grow
// older than a short limit and declares them dead; it returns the loss.
// The database's clock cannot be faked, so this sleeps a little.
func (e *env) declareDead() store.NodeLoss {
	e.t.Helper()
	time.Sleep(30 * time.Millisecond)
	loss, err := e.s.DeclareDeadNodes(e.ctx, 10*time.Millisecond, "")
	if err != nil {
		e.t.Fatalf("DeclareDeadNodes: %v", err)
	}
	return loss
}

// testNodeRegister: a registered node reads back as given, active, started
// and heartbeating now by the database's clock, with no usage.
func testNodeRegister(e *env) {
	t := e.t
	n := model.Node{
		ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleNode,
		AdvertiseURL: "https://node-1.internal:7443", Slots: 10, CPUs: 16, MemoryMiB: 32768,
		Labels: model.NodeLabels{"zone": "eu-1a", "example.com/gpu": "true"}, CanPull: true,
	}
	dbNow, err := e.s.DatabaseNow(e.ctx)
	must(t, err)
	e.near("DatabaseNow", dbNow, time.Now())
	got := e.register(n)
	want := n
	want.State, want.StartedAt, want.HeartbeatAt = model.NodeActive, got.StartedAt, got.HeartbeatAt
	if !reflect.DeepEqual(got.Node, want) || got.Usage != (model.NodeUsage{}) {
		t.Fatalf("RegisterNode = %+v\nwant %+v", got, want)
	}
	e.near("StartedAt", got.StartedAt, dbNow)
	if got.HeartbeatAt.Before(got.StartedAt) || got.HeartbeatAt.Sub(got.StartedAt) > time.Second ||
		got.StartedAt.Location() != time.UTC || got.HeartbeatAge < 0 || got.HeartbeatAge > clockSlack {
		t.Fatalf("times of a new node: started %s, heartbeat %s, age %s", got.StartedAt, got.HeartbeatAt, got.HeartbeatAge)
	}
	read := e.getNode(n.ID)
	read.HeartbeatAge = got.HeartbeatAge
	if !reflect.DeepEqual(read, got) {
		t.Fatalf("GetNode = %+v\nwant %+v", read, got)
	}
	_, err = e.s.GetNode(e.ctx, model.NewNodeID())
	mustIs(t, err, store.ErrNotFound)
	rec, err := e.s.GetNodeRecord(e.ctx, n.ID)
	must(t, err)
	if !reflect.DeepEqual(rec, got.Node) {
		t.Fatalf("GetNodeRecord = %+v\nwant %+v", rec, got.Node)
	}
	_, err = e.s.GetNodeRecord(e.ctx, model.NewNodeID())
	mustIs(t, err, store.ErrNotFound)
}

// testNodeRegisterErrors: a node record the store could not read back is
// refused, and nothing is written.
func testNodeRegisterErrors(e *env) {
	t := e.t
	valid := func() model.Node {
		return model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleAll, AdvertiseURL: "http://a:1"}
	}
	for _, tc := range []struct {
		name string
		edit func(*model.Node)
	}{
		{"no ID", func(n *model.Node) { n.ID = "" }},
		{"malformed ID", func(n *model.Node) { n.ID = "node-1" }},
		{"no incarnation", func(n *model.Node) { n.Incarnation = "" }},
		{"malformed incarnation", func(n *model.Node) { n.Incarnation = "inc_nope" }},
		{"no role", func(n *model.Node) { n.Role = "" }},
		{"unknown role", func(n *model.Node) { n.Role = "worker" }},
		{"negative slots", func(n *model.Node) { n.Slots = -1 }},
		{"negative CPUs", func(n *model.Node) { n.CPUs = -1 }},
		{"negative memory", func(n *model.Node) { n.MemoryMiB = -1 }},
		{"bad label key", func(n *model.Node) { n.Labels = model.NodeLabels{"-zone": "a"} }},
		{"bad label value", func(n *model.Node) { n.Labels = model.NodeLabels{"zone": "a b"} }},
		{"no advertise URL", func(n *model.Node) { n.AdvertiseURL = "" }},
		{"advertise URL not http", func(n *model.Node) { n.AdvertiseURL = "ftp://a:1" }},
		{"advertise URL with a query", func(n *model.Node) { n.AdvertiseURL = "http://a:1/?x=1" }},
	} {
		n := valid()
		tc.edit(&n)
		_, err := e.s.RegisterNode(e.ctx, n)
		if !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("%s: RegisterNode = %v, want ErrInvalid", tc.name, err)
		}
	}
	list, err := e.s.ListNodes(e.ctx)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("refused registrations stored %d nodes", len(list))
	}
}

// testNodeReregisterFences: a node registered again (a new process) fences
// its previous incarnation: whatever the old process writes is refused with
// ErrFenced, its leases are lost, and the new incarnation works.
func testNodeReregisterFences(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.node()
	sb, create := e.mustCreateOn(p.ID, tpl.Digest, node)
	_, second := e.mustCreateOn(p.ID, tpl.Digest, node)
	old := e.fence(node)
	at := e.now()
	if got := e.claim(node, at); got.ID != create.ID {
		t.Fatalf("claimed %s, want %s", got.ID, create.ID)
	}
	must(t, e.s.SetNodeTemplates(e.ctx, old, []model.TemplateDigest{tpl.Digest}))
	held := e.getOp(create)

	st := e.register(model.Node{ID: node, Slots: 5})
	if st.Incarnation == old.Incarnation || st.Incarnation != e.inc(node) || st.Slots != 5 || st.State != model.NodeActive {
		t.Fatalf("registered again: %+v", st)
	}
	if got, err := e.s.NodesWithTemplate(e.ctx, tpl.Digest); err != nil || len(got) != 0 {
		t.Fatalf("NodesWithTemplate after a new incarnation = %v, %v; want none (the list is cleared)", got, err)
	}

	// The old incarnation is fenced everywhere.
	_, err := e.s.Heartbeat(e.ctx, old)
	mustIs(t, err, store.ErrFenced)
	oldClaim := store.Claim{Owner: node, Incarnation: old.Incarnation, Lease: time.Minute, Now: at.Add(time.Hour)}
	_, err = e.s.ClaimOperation(e.ctx, oldClaim)
	mustIs(t, err, store.ErrFenced)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"RenewLease", e.s.RenewLease(e.ctx, create.ID, oldClaim)},
		{"RetryOperation", e.s.RetryOperation(e.ctx, store.Retry{OperationID: create.ID, Owner: node, Incarnation: old.Incarnation, Now: at})},
		{"FinishOperation", e.s.FinishOperation(e.ctx, store.Finish{OperationID: create.ID, Owner: node, Incarnation: old.Incarnation,
			State: model.OpSucceeded, Now: at})},
	} {
		if !errors.Is(tc.err, store.ErrLeaseLost) || !errors.Is(tc.err, store.ErrFenced) {
			t.Fatalf("%s of the old incarnation's lease = %v, want ErrLeaseLost and ErrFenced", tc.name, tc.err)
		}
	}
	checkOperation(t, e.getOp(create), held)
	mustIs(t, e.s.SetNodeTemplates(e.ctx, old, nil), store.ErrFenced)
	mustIs(t, e.s.TransitionOnNode(e.ctx, sb.ID, old, model.StatePending, model.StateCreating, "", "runc", e.now()), store.ErrFenced)
	if got := e.getSandbox(sb.ID); got.Runtime != "" || got.State != model.StatePending {
		t.Fatalf("fenced TransitionOnNode recorded %s on %q", got.State, got.Runtime)
	}
	// A made-up incarnation is no better.
	_, err = e.s.Heartbeat(e.ctx, store.Fence{Node: node, Incarnation: model.NewIncarnation()})
	mustIs(t, err, store.ErrFenced)

	// The new incarnation works: the held lease until it expires.
	_, err = e.s.Heartbeat(e.ctx, e.fence(node))
	must(t, err)
	if got := e.claim(node, at); got.ID != second.ID {
		t.Fatalf("new incarnation claimed %s, want the free %s", got.ID, second.ID)
	}
	e.noWork(node, at)
	got := e.claim(node, at.Add(time.Hour))
	if got.ID != create.ID || got.Attempts != 2 {
		t.Fatalf("after the old lease expired claimed %+v, want %s at attempt 2", got, create.ID)
	}
	must(t, e.finish(store.Finish{OperationID: create.ID, Owner: node, State: model.OpSucceeded, Now: at.Add(time.Hour)}))
}

// testNodeReregisterStates: an operator's cordon or drain outlives a
// restart; a dead node becomes active.
func testNodeReregisterStates(e *env) {
	t := e.t
	dead := e.node()
	if loss := e.declareDead(); !slices.Equal(loss.Nodes, []model.NodeID{dead}) {
		t.Fatalf("declared %v dead, want [%s]", loss.Nodes, dead)
	}
	nodes := map[model.NodeState]model.NodeID{model.NodeDead: dead}
	for _, st := range []model.NodeState{model.NodeActive, model.NodeCordoned, model.NodeDraining} {
		id := e.node()
		if st != model.NodeActive {
			_, err := e.s.SetNodeState(e.ctx, id, st)
			must(t, err)
		}
		nodes[st] = id
	}
	if n := e.getNode(dead); n.State != model.NodeDead || n.StateReason == "" {
		t.Fatalf("dead node: %+v, want dead with a reason", n)
	}
	for _, tc := range []struct{ before, after model.NodeState }{
		{model.NodeActive, model.NodeActive},
		{model.NodeCordoned, model.NodeCordoned},
		{model.NodeDraining, model.NodeDraining},
		{model.NodeDead, model.NodeActive},
	} {
		id := nodes[tc.before]
		old := e.restart(id)
		n := e.getNode(id)
		if n.State != tc.after || n.StateReason != "" || n.Incarnation == old {
			t.Fatalf("%s node registered again: %+v, want %s with a new incarnation and no reason", tc.before, n, tc.after)
		}
		_, err := e.s.Heartbeat(e.ctx, e.fence(id))
		must(t, err)
		_, err = e.s.Heartbeat(e.ctx, store.Fence{Node: id, Incarnation: old})
		mustIs(t, err, store.ErrFenced)
	}
}

// testNodeHeartbeat: a heartbeat sets the node's heartbeat to the
// database's now; only the current incarnation of a node not dead may.
func testNodeHeartbeat(e *env) {
	t := e.t
	node := e.node()
	first := e.getNode(node).HeartbeatAt
	time.Sleep(10 * time.Millisecond)
	at, err := e.s.Heartbeat(e.ctx, e.fence(node))
	must(t, err)
	if !at.After(first) || at.Location() != time.UTC {
		t.Fatalf("heartbeat at %s, not after the registration's %s", at, first)
	}
	dbNow, err := e.s.DatabaseNow(e.ctx)
	must(t, err)
	if dbNow.Before(at) {
		t.Fatalf("DatabaseNow %s is before the heartbeat %s", dbNow, at)
	}
	e.near("heartbeat", at, time.Now())
	n := e.getNode(node)
	if !n.HeartbeatAt.Equal(at) {
		t.Fatalf("stored heartbeat %s, want %s", n.HeartbeatAt, at)
	}
	// Cordoned and draining nodes are alive: they heartbeat.
	for _, st := range []model.NodeState{model.NodeCordoned, model.NodeDraining} {
		_, err := e.s.SetNodeState(e.ctx, node, st)
		must(t, err)
		_, err = e.s.Heartbeat(e.ctx, e.fence(node))
		must(t, err)
	}
	_, err = e.s.Heartbeat(e.ctx, store.Fence{Node: model.NewNodeID(), Incarnation: model.NewIncarnation()})
	mustIs(t, err, store.ErrFenced)
	_, err = e.s.Heartbeat(e.ctx, store.Fence{Node: node})
	mustIs(t, err, store.ErrFenced)
	// A dead node's heartbeat is refused: it must start again.
	last := e.getNode(node).HeartbeatAt
	e.declareDead()
	_, err = e.s.Heartbeat(e.ctx, e.fence(node))
	mustIs(t, err, store.ErrFenced)
	if got := e.getNode(node); got.State != model.NodeDead || !got.HeartbeatAt.Equal(last) {
		t.Fatalf("dead node after a refused heartbeat: %+v, want dead, its heartbeat still %s", got, last)
	}
	for _, after := range []time.Duration{0, -time.Second} {
		_, err = e.s.DeclareDeadNodes(e.ctx, after, "")
		mustIs(t, err, model.ErrInvalid)
	}
}

// testNodeDeclareDead: a node whose heartbeat is too old is declared dead
// and its sandboxes settled; a node that heartbeats is left alone.
func testNodeDeclareDead(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	alive := e.homeNode()
	dead := e.node()
	deadFence := e.fence(dead)

	// starting: its create claimed (and its runtime chosen), the sandbox
	// still pending.
	starting, startingOp, cerr := e.createOn(p.ID, tpl.Digest, dead, func(sb *model.Sandbox) { sb.Runtime = "runsc" })
	must(t, cerr)
	if got := e.claim(dead, e.now()); got.ID != startingOp.ID {
		t.Fatalf("claimed %s, want %s", got.ID, startingOp.ID)
	}
	// running, with a pause under way.
	running := e.run(e.sandboxWith(p.ID, tpl.Digest, onNode(dead)), dead)
	// deleting: a delete requested, not done.
	deleting := e.run(e.sandboxWith(p.ID, tpl.Digest, onNode(dead)), dead)
	// aborted: deleted while its create was still under way.
	aborted, abortedOp := e.mustCreateOn(p.ID, tpl.Digest, dead)
	if got := e.claim(dead, e.now()); got.ID != abortedOp.ID {
		t.Fatalf("claimed %s, want %s", got.ID, abortedOp.ID)
	}
	must(t, e.s.TransitionSandbox(e.ctx, aborted.ID, model.StatePending, model.StateCreating, "", e.now()))
	pause := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: running.ID, Kind: model.OpPause,
		State: model.OpPending, CreatedAt: e.now(), UpdatedAt: e.now()}
	_, err := e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: running.ID, Operation: pause, Now: e.now()})
	must(t, err)
	delOp := e.deleteOp(deleting)
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: deleting.ID, Operation: delOp, Now: e.now()})
	must(t, err)
	abortDel := e.deleteOp(aborted)
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: aborted.ID, Operation: abortDel, Now: e.now()})
	must(t, err)
	if op := e.getOp(abortedOp); op.State != model.OpRunning {
		t.Fatalf("the aborted create: %+v, want still running", op)
	}
	// waiting: a create nobody started.
	waiting, _ := e.mustCreateOn(p.ID, tpl.Digest, dead)
	// A sandbox of the alive node.
	safe := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), alive)
	if u := e.getNode(dead).Usage; u.Sandboxes != 5 {
		t.Fatalf("usage of the node before its loss: %+v, want 5 sandboxes", u)
	}

	time.Sleep(600 * time.Millisecond)
	_, err = e.s.Heartbeat(e.ctx, e.fence(alive))
	must(t, err)
	loss, err := e.s.DeclareDeadNodes(e.ctx, 500*time.Millisecond, "")
	must(t, err)
	want := store.NodeLoss{Nodes: []model.NodeID{dead}, Failed: 1, Replaced: 2, Deleted: 2}
	if !reflect.DeepEqual(loss, want) {
		t.Fatalf("DeclareDeadNodes = %+v, want %+v", loss, want)
	}
	n := e.getNode(dead)
	if n.State != model.NodeDead || n.StateReason == "" || n.Usage != (model.NodeUsage{}) {
		t.Fatalf("dead node: %+v, want dead with a reason and no usage", n)
	}
	if a := e.getNode(alive); a.State != model.NodeActive || a.Usage.Sandboxes != 1 {
		t.Fatalf("alive node: %+v", a)
	}

	// The dead incarnation is fenced.
	_, err = e.s.Heartbeat(e.ctx, deadFence)
	mustIs(t, err, store.ErrFenced)
	_, err = e.s.ClaimOperation(e.ctx, store.Claim{Owner: dead, Incarnation: deadFence.Incarnation, Lease: time.Minute, Now: e.now()})
	mustIs(t, err, store.ErrFenced)

	// Creates not started lost their node and runtime, and their leases.
	for _, sb := range []model.Sandbox{waiting, starting} {
		got := e.getSandbox(sb.ID)
		if got.State != model.StatePending || got.NodeID != "" || got.Runtime != "" {
			t.Fatalf("unstarted create after its node's loss: %+v, want pending and unplaced", got)
		}
	}
	unplaced, err := e.s.ListUnplaced(e.ctx, 10)
	must(t, err)
	e.wantIDs("unplaced after the loss", unplaced, starting.ID, waiting.ID)
	err = e.finish(store.Finish{OperationID: startingOp.ID, Owner: dead, Incarnation: deadFence.Incarnation, State: model.OpSucceeded, Now: e.now()})
	mustIs(t, err, store.ErrLeaseLost)
	if op := e.getOp(startingOp); op.State != model.OpRunning && op.State != model.OpPending {
		t.Fatalf("released create: %+v, want unfinished", op)
	}
	// Placed again, they are claimable by their new node at once.
	must(t, e.s.AssignNode(e.ctx, starting.ID, alive))
	got := e.claim(alive, e.now())
	if got.ID != startingOp.ID || got.Attempts != 2 {
		t.Fatalf("new node claimed %+v, want %s at attempt 2", got, startingOp.ID)
	}
	e.noWork(alive, e.now())

	// The running sandbox failed, its pause with it.
	if got := e.getSandbox(running.ID); got.State != model.StateFailed || got.StateReason != model.NodeLostReason {
		t.Fatalf("running sandbox after its node's loss: %s %q", got.State, got.StateReason)
	}
	if op := e.getOp(pause); op.State != model.OpFailed || op.Error == nil || op.Error.Code != "node_lost" || op.FinishedAt == nil {
		t.Fatalf("pause after its node's loss: %+v", op)
	}
	// The deletes are done; a create still under way ended with them.
	for _, del := range []model.Operation{delOp, abortDel} {
		if got := e.getSandbox(del.SandboxID); got.State != model.StateDeleted {
			t.Fatalf("deleting sandbox after its node's loss: %s", got.State)
		}
		if op := e.getOp(del); op.State != model.OpSucceeded || op.FinishedAt == nil {
			t.Fatalf("delete after its node's loss: %+v", op)
		}
	}
	if op := e.getOp(abortedOp); op.State != model.OpFailed || op.Error == nil || op.Error.Code != "node_lost" {
		t.Fatalf("create of a sandbox deleted with its node: %+v, want failed node_lost", op)
	}
	checkSandbox(t, e.getSandbox(safe.ID), safe)
	for _, op := range mustUnfinished(e) {
		if op.SandboxID != waiting.ID && op.SandboxID != starting.ID {
			t.Fatalf("unfinished operation left on the dead node: %+v", op)
		}
	}

	// Again: nothing new is declared, but a delete requested since is
	// completed (the node cannot do it).
	del := e.deleteOp(running)
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: running.ID, Operation: del, Now: e.now()})
	must(t, err)
	_, err = e.s.Heartbeat(e.ctx, e.fence(alive))
	must(t, err)
	loss, err = e.s.DeclareDeadNodes(e.ctx, 500*time.Millisecond, "")
	must(t, err)
	if want := (store.NodeLoss{Deleted: 1}); !reflect.DeepEqual(loss, want) {
		t.Fatalf("second DeclareDeadNodes = %+v, want %+v", loss, want)
	}
	if got := e.getSandbox(running.ID); got.State != model.StateDeleted {
		t.Fatalf("sandbox deleted after its node's loss: %s", got.State)
	}
	if op := e.getOp(del); op.State != model.OpSucceeded {
		t.Fatalf("delete after its node's loss: %+v", op)
	}

	// The node comes back as a new process: active, with nothing of its
	// former sandboxes to claim.
	e.restart(dead)
	if n := e.getNode(dead); n.State != model.NodeActive {
		t.Fatalf("restarted node: %+v", n)
	}
	e.noWork(dead, e.now().Add(time.Hour))
}

// mustUnfinished lists the unfinished operations.
func mustUnfinished(e *env) []model.Operation {
	e.t.Helper()
	ops, err := e.s.ListUnfinishedOperations(e.ctx)
	must(e.t, err)
	return ops
}

// testNodeSetState: an operator cordons, drains and uncordons a node; a
// dead node waits for its restart.
func testNodeSetState(e *env) {
	t := e.t
	dead := e.node()
	e.declareDead()
	node := e.node()
	for _, tc := range []struct {
		id    model.NodeID
		state model.NodeState
		want  error
	}{
		{node, model.NodeCordoned, nil},
		{node, model.NodeDraining, nil},
		{node, model.NodeDraining, nil},
		{node, model.NodeActive, nil},
		{node, model.NodeDead, model.ErrInvalid},
		{node, "paused", model.ErrInvalid},
		{node, "", model.ErrInvalid},
		{model.NewNodeID(), model.NodeCordoned, store.ErrNotFound},
		{dead, model.NodeActive, model.ErrInvalidTransition},
		{dead, model.NodeCordoned, model.ErrInvalidTransition},
	} {
		before, beforeErr := e.s.GetNode(e.ctx, tc.id)
		got, err := e.s.SetNodeState(e.ctx, tc.id, tc.state)
		if tc.want != nil {
			if !errors.Is(err, tc.want) {
				t.Fatalf("SetNodeState(%s) = %v, want %v", tc.state, err, tc.want)
			}
			if beforeErr == nil {
				if after := e.getNode(tc.id); after.State != before.State {
					t.Fatalf("refused SetNodeState(%s) changed the state %s to %s", tc.state, before.State, after.State)
				}
			}
			continue
		}
		must(t, err)
		if got.State != tc.state || e.getNode(tc.id).State != tc.state {
			t.Fatalf("SetNodeState(%s) = %+v", tc.state, got)
		}
	}
	// The heartbeat is not an operator's: a state change leaves it.
	n := e.getNode(node)
	_, err := e.s.SetNodeState(e.ctx, node, model.NodeCordoned)
	must(t, err)
	if got := e.getNode(node); !got.HeartbeatAt.Equal(n.HeartbeatAt) || got.Incarnation != n.Incarnation {
		t.Fatalf("SetNodeState changed more than the state: %+v, was %+v", got, n)
	}
}

// testNodeRoom: a create placed on a node is refused with ErrNodeFull,
// writing nothing, unless the node runs sandboxes, takes new ones and has
// room for it.
func testNodeRoom(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	reg := func(n model.Node) model.NodeID {
		n.ID = model.NewNodeID()
		return e.register(n).ID
	}
	state := func(st model.NodeState) model.NodeID {
		id := reg(model.Node{})
		_, err := e.s.SetNodeState(e.ctx, id, st)
		must(t, err)
		return id
	}
	mem := func(mib int) func(*model.Sandbox) { return func(sb *model.Sandbox) { sb.Resources.MemoryMiB = mib } }
	for _, tc := range []struct {
		name string
		node model.NodeID
		// creates in order, and which succeed
		sizes []func(*model.Sandbox)
		ok    []bool
	}{
		{"one slot", reg(model.Node{Slots: 1}), []func(*model.Sandbox){nil, nil}, []bool{true, false}},
		{"three slots", reg(model.Node{Slots: 3}), []func(*model.Sandbox){nil, nil, nil, nil}, []bool{true, true, true, false}},
		{"memory", reg(model.Node{MemoryMiB: 1024}), []func(*model.Sandbox){mem(512), mem(600), mem(512), mem(1)},
			[]bool{true, false, true, false}},
		{"memory and slots", reg(model.Node{Slots: 2, MemoryMiB: 1024}), []func(*model.Sandbox){mem(1024), mem(0), mem(1)},
			[]bool{true, true, false}},
		{"CPUs are shared, not reserved", reg(model.Node{CPUs: 2}), []func(*model.Sandbox){nil, nil, nil}, []bool{true, true, true}},
		{"unbounded", reg(model.Node{}), []func(*model.Sandbox){mem(1 << 20), nil}, []bool{true, true}},
		{"role node", reg(model.Node{Role: model.RoleNode, Slots: 1}), []func(*model.Sandbox){nil, nil}, []bool{true, false}},
		{"role api", reg(model.Node{Role: model.RoleAPI}), []func(*model.Sandbox){nil}, []bool{false}},
		{"cordoned", state(model.NodeCordoned), []func(*model.Sandbox){nil}, []bool{false}},
		{"draining", state(model.NodeDraining), []func(*model.Sandbox){nil}, []bool{false}},
		{"unregistered", model.NewNodeID(), []func(*model.Sandbox){nil}, []bool{false}},
	} {
		for i, size := range tc.sizes {
			sb, _, err := e.createOn(p.ID, tpl.Digest, tc.node, size)
			if tc.ok[i] {
				if err != nil {
					t.Fatalf("%s: create %d: %v", tc.name, i, err)
				}
				if got := e.getSandbox(sb.ID); got.NodeID != tc.node {
					t.Fatalf("%s: create %d placed on %q", tc.name, i, got.NodeID)
				}
				continue
			}
			if !errors.Is(err, store.ErrNodeFull) {
				t.Fatalf("%s: create %d = %v, want ErrNodeFull", tc.name, i, err)
			}
		}
	}
	// An unplaced create is not checked against any node.
	_, _, err := e.createOn(p.ID, tpl.Digest, "", mem(1<<20))
	must(t, err)
}

// testNodeRoomFreed: failed and deleted sandboxes hold no room; every other
// state does.
func testNodeRoomFreed(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.register(model.Node{ID: model.NewNodeID(), Slots: 1}).ID
	full := func() {
		t.Helper()
		_, _, err := e.createOn(p.ID, tpl.Digest, node, nil)
		mustIs(t, err, store.ErrNodeFull)
	}
	// Failed.
	sb, _ := e.mustCreateOn(p.ID, tpl.Digest, node)
	full()
	must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateCreating, "", e.now()))
	full()
	must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StateCreating, model.StateFailed, "boom", e.now()))
	// Deleted, through deleting (which holds room).
	sb, _ = e.mustCreateOn(p.ID, tpl.Digest, node)
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Now: e.now()})
	must(t, err)
	full()
	must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StateDeleting, model.StateDeleted, "", e.now()))
	e.mustCreateOn(p.ID, tpl.Digest, node)
	full()
	if u := e.getNode(node).Usage; u.Sandboxes != 1 {
		t.Fatalf("usage %+v, want one live sandbox", u)
	}
}

// testNodeAssign: AssignNode places an unplaced pending sandbox, checking
// the node's room; anything else is ErrStateChanged.
func testNodeAssign(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	one := e.register(model.Node{ID: model.NewNodeID(), Slots: 1}).ID
	other := e.node()
	cordoned := e.node()
	_, err := e.s.SetNodeState(e.ctx, cordoned, model.NodeCordoned)
	must(t, err)

	a, aOp := e.mustCreateOn(p.ID, tpl.Digest, "")
	b, _ := e.mustCreateOn(p.ID, tpl.Digest, "")
	for _, bad := range []model.NodeID{cordoned, model.NewNodeID()} {
		mustIs(t, e.s.AssignNode(e.ctx, a.ID, bad), store.ErrNodeFull)
		checkSandbox(t, e.getSandbox(a.ID), a)
	}
	e.noWork(one, e.now())
	must(t, e.s.AssignNode(e.ctx, a.ID, one))
	if got := e.getSandbox(a.ID); got.NodeID != one || got.State != model.StatePending {
		t.Fatalf("assigned sandbox: %+v", got)
	}
	// One slot: b does not fit.
	mustIs(t, e.s.AssignNode(e.ctx, b.ID, one), store.ErrNodeFull)
	checkSandbox(t, e.getSandbox(b.ID), b)
	// Placed already: not again, not elsewhere.
	mustIs(t, e.s.AssignNode(e.ctx, a.ID, one), store.ErrStateChanged)
	mustIs(t, e.s.AssignNode(e.ctx, a.ID, other), store.ErrStateChanged)
	if got := e.claim(one, e.now()); got.ID != aOp.ID {
		t.Fatalf("claimed %s, want the assigned create %s", got.ID, aOp.ID)
	}
	// Unplaced but no longer pending.
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: b.ID, Operation: e.deleteOp(b), Now: e.now()})
	must(t, err)
	mustIs(t, e.s.AssignNode(e.ctx, b.ID, other), store.ErrStateChanged)
	if got := e.getSandbox(b.ID); got.NodeID != "" {
		t.Fatalf("deleting sandbox assigned to %s", got.NodeID)
	}
	if err := e.s.AssignNode(e.ctx, model.NewSandboxID(), other); !errors.Is(err, store.ErrStateChanged) && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AssignNode of an unknown sandbox = %v", err)
	}
}

// testNodeUsage: ListNodes lists every node in ID order with what its live
// sandboxes hold and the age of its heartbeat.
func testNodeUsage(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	home := e.homeNode() // newSandbox's, unused here
	busy := e.register(model.Node{ID: model.NewNodeID(), Slots: 10, CPUs: 8, MemoryMiB: 4096}).ID
	idle := e.register(model.Node{ID: model.NewNodeID(), Role: model.RoleAPI}).ID
	var live []model.Sandbox
	for _, mib := range []int{256, 512} {
		sb, _, err := e.createOn(p.ID, tpl.Digest, busy, func(sb *model.Sandbox) { sb.Resources = model.Resources{CPUs: 3, MemoryMiB: mib, DiskMiB: 1024} })
		must(t, err)
		live = append(live, sb)
	}
	ended, _ := e.mustCreateOn(p.ID, tpl.Digest, busy)
	must(t, e.s.TransitionSandbox(e.ctx, ended.ID, model.StatePending, model.StateCreating, "", e.now()))
	must(t, e.s.TransitionSandbox(e.ctx, ended.ID, model.StateCreating, model.StateFailed, "", e.now()))
	e.mustCreateOn(p.ID, tpl.Digest, "") // unplaced: nobody's

	time.Sleep(20 * time.Millisecond)
	list, err := e.s.ListNodes(e.ctx)
	must(t, err)
	wantIDs := []model.NodeID{home, busy, idle}
	slices.Sort(wantIDs)
	gotIDs := make([]model.NodeID, len(list))
	for i, n := range list {
		gotIDs[i] = n.ID
	}
	if !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("ListNodes = %+v, want %v in ID order", list, wantIDs)
	}
	for _, n := range list {
		want := model.NodeUsage{}
		if n.ID == busy {
			want = model.NodeUsage{Sandboxes: 2, CPUs: 6, MemoryMiB: 768}
		}
		if n.Usage != want {
			t.Fatalf("usage of %s = %+v, want %+v", n.ID, n.Usage, want)
		}
		if n.HeartbeatAge < 15*time.Millisecond || n.HeartbeatAge > clockSlack {
			t.Fatalf("heartbeat age of %s = %s, want about 20ms", n.ID, n.HeartbeatAge)
		}
		got := e.getNode(n.ID)
		got.HeartbeatAge = n.HeartbeatAge
		if !reflect.DeepEqual(got, n) {
			t.Fatalf("GetNode = %+v, ListNodes has %+v", got, n)
		}
	}
	// A heartbeat resets the age.
	_, err = e.s.Heartbeat(e.ctx, e.fence(busy))
	must(t, err)
	if age := e.getNode(busy).HeartbeatAge; age > 15*time.Millisecond && age > clockSlack/2 {
		t.Fatalf("heartbeat age just after a heartbeat: %s", age)
	}

	// Draining is done when the last live sandbox has ended.
	st, err := e.s.SetNodeState(e.ctx, busy, model.NodeDraining)
	must(t, err)
	if st.Drained() {
		t.Fatalf("draining node with %d sandboxes is drained", st.Usage.Sandboxes)
	}
	for _, sb := range live {
		must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateDeleting, "", e.now()))
		must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StateDeleting, model.StateDeleted, "", e.now()))
	}
	if n := e.getNode(busy); !n.Drained() || n.Usage != (model.NodeUsage{}) {
		t.Fatalf("draining node without sandboxes: %+v, want drained", n)
	}
}

// testNodeTemplates: a node's list of local templates is replaced whole,
// only by its current incarnation.
func testNodeTemplates(e *env) {
	t := e.t
	d1, d2, d3 := e.template().Digest, e.template().Digest, e.template().Digest
	n1, n2 := e.node(), e.node()
	with := func(d model.TemplateDigest, want ...model.NodeID) {
		t.Helper()
		got, err := e.s.NodesWithTemplate(e.ctx, d)
		must(t, err)
		slices.Sort(want)
		if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
			t.Fatalf("NodesWithTemplate(%s) = %v, want %v", d, got, want)
		}
	}
	with(d1)
	must(t, e.s.SetNodeTemplates(e.ctx, e.fence(n1), []model.TemplateDigest{d1, d2}))
	must(t, e.s.SetNodeTemplates(e.ctx, e.fence(n2), []model.TemplateDigest{d1}))
	with(d1, n1, n2)
	with(d2, n1)
	with(d3)
	must(t, e.s.SetNodeTemplates(e.ctx, e.fence(n1), []model.TemplateDigest{d3}))
	with(d1, n2)
	with(d2)
	with(d3, n1)
	// Fenced: a stale or unknown incarnation changes nothing.
	for _, f := range []store.Fence{
		{Node: n1, Incarnation: model.NewIncarnation()},
		{Node: model.NewNodeID(), Incarnation: model.NewIncarnation()},
	} {
		mustIs(t, e.s.SetNodeTemplates(e.ctx, f, []model.TemplateDigest{d2}), store.ErrFenced)
	}
	with(d2)
	must(t, e.s.SetNodeTemplates(e.ctx, e.fence(n2), nil))
	with(d1)
	// A list is a set: a digest listed twice is recorded once.
	must(t, e.s.SetNodeTemplates(e.ctx, e.fence(n2), []model.TemplateDigest{d1, d1}))
	with(d1, n2)
}

// testNodeListUnplaced: ListUnplaced lists the pending sandboxes without a
// node, oldest first (ties by ID), up to limit.
func testNodeListUnplaced(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.node()
	first, _ := e.mustCreateOn(p.ID, tpl.Digest, "")
	e.mustCreateOn(p.ID, tpl.Digest, node) // placed
	same := e.now()
	var tied []model.SandboxID
	for range 2 {
		sb, op := e.newSandbox(p.ID, tpl.Digest, nil)
		sb.NodeID, sb.CreatedAt, op.CreatedAt = "", same, same
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		tied = append(tied, sb.ID)
	}
	slices.Sort(tied)
	gone, _ := e.mustCreateOn(p.ID, tpl.Digest, "")
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: gone.ID, Operation: e.deleteOp(gone), Now: e.now()})
	must(t, err)
	last, _ := e.mustCreateOn(p.ID, tpl.Digest, "")

	list := func(limit int) []model.Sandbox {
		t.Helper()
		got, err := e.s.ListUnplaced(e.ctx, limit)
		must(t, err)
		return got
	}
	all := list(1000)
	e.wantIDs("unplaced", all, first.ID, tied[0], tied[1], last.ID)
	checkSandbox(t, all[0], first)
	e.wantIDs("unplaced, limit 2", list(2), first.ID, tied[0])
	e.wantIDs("unplaced, limit 1", list(1), first.ID)
	for _, limit := range []int{0, -1, 1001} {
		_, err := e.s.ListUnplaced(e.ctx, limit)
		mustIs(t, err, model.ErrInvalid)
	}
	must(t, e.s.AssignNode(e.ctx, first.ID, node))
	e.wantIDs("unplaced after an assignment", list(10), tied[0], tied[1], last.ID)
}

// testNodeConcurrentPlacement: creates racing for a node's last slots get
// exactly as many as there are.
func testNodeConcurrentPlacement(e *env) {
	t := e.t
	const (
		n     = 10
		slots = 3
	)
	p := e.project()
	tpl := e.template()
	node := e.register(model.Node{ID: model.NewNodeID(), Slots: slots}).ID
	sbs := make([]model.Sandbox, n)
	ops := make([]model.Operation, n)
	for i := range sbs {
		sbs[i], ops[i] = e.newSandbox(p.ID, tpl.Digest, nil)
		sbs[i].NodeID = node
	}
	errs := make([]error, n)
	parallel(n, func(i int) {
		errs[i] = e.s.CreateSandbox(e.ctx, sbs[i], policy.Spec{}, ops[i], nil)
	})
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, store.ErrNodeFull):
			_, gerr := e.s.GetSandboxByID(e.ctx, sbs[i].ID)
			mustIs(t, gerr, store.ErrNotFound)
		default:
			t.Fatalf("concurrent create: %v, want nil or ErrNodeFull", err)
		}
	}
	if ok != slots {
		t.Fatalf("%d concurrent creates fit a node of %d slots", ok, slots)
	}
	if u := e.getNode(node).Usage; u.Sandboxes != slots {
		t.Fatalf("usage %+v, want %d sandboxes", u, slots)
	}

	// The same through AssignNode.
	other := e.register(model.Node{ID: model.NewNodeID(), Slots: slots}).ID
	var unplaced []model.Sandbox
	for range n {
		sb, _ := e.mustCreateOn(p.ID, tpl.Digest, "")
		unplaced = append(unplaced, sb)
	}
	parallel(n, func(i int) {
		errs[i] = e.s.AssignNode(e.ctx, unplaced[i].ID, other)
	})
	ok = 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrNodeFull):
			t.Fatalf("concurrent assignment: %v, want nil or ErrNodeFull", err)
		}
	}
	if ok != slots {
		t.Fatalf("%d concurrent assignments fit a node of %d slots", ok, slots)
	}
	left, err := e.s.ListUnplaced(e.ctx, 100)
	must(t, err)
	if len(left) != n-slots {
		t.Fatalf("%d sandboxes left unplaced, want %d", len(left), n-slots)
	}
}

// testNodeSelector: a sandbox's node selector is stored with it.
func testNodeSelector(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	for _, sel := range []model.NodeLabels{nil, {"zone": "eu-1a"}, {"example.com/gpu": "true", "zone": "b", "empty": ""}} {
		sb, _, err := e.createOn(p.ID, tpl.Digest, "", func(sb *model.Sandbox) { sb.NodeSelector = sel })
		must(t, err)
		got := e.getSandbox(sb.ID)
		checkSandbox(t, got, sb)
		if !reflect.DeepEqual(got.NodeSelector, sel) {
			t.Fatalf("node selector %v, want %v", got.NodeSelector, sel)
		}
		page, err := e.s.ListUnplaced(e.ctx, 100)
		must(t, err)
		if i := slices.IndexFunc(page, func(s model.Sandbox) bool { return s.ID == sb.ID }); i < 0 || !reflect.DeepEqual(page[i].NodeSelector, sel) {
			t.Fatalf("ListUnplaced lost the selector %v", sel)
		}
	}
	_, _, err := e.createOn(p.ID, tpl.Digest, "", func(sb *model.Sandbox) { sb.NodeSelector = model.NodeLabels{"bad key": "x"} })
	mustIs(t, err, model.ErrInvalid)
}

// testNodeLossRacesDeletes: deletes requested while the node is declared
// dead neither fail nor deadlock, whichever comes first; in the end every
// sandbox is deleted.
func testNodeLossRacesDeletes(e *env) {
	t := e.t
	const n = 16
	p := e.project()
	tpl := e.template()
	node := e.node()
	var list []model.Sandbox
	for range n {
		list = append(list, e.run(e.sandboxWith(p.ID, tpl.Digest, onNode(node)), node))
	}
	for _, sb := range list {
		// A pending pause: the delete cancels it, the loss fails it.
		pause := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: sb.ID, Kind: model.OpPause,
			State: model.OpPending, CreatedAt: e.now(), UpdatedAt: e.now()}
		_, err := e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: pause, Now: e.now()})
		must(t, err)
	}
	dels := make([]model.Operation, n)
	for i, sb := range list {
		dels[i] = e.deleteOp(sb)
	}
	now := e.now()
	time.Sleep(30 * time.Millisecond)
	errs := make([]error, n+2)
	parallel(n+2, func(i int) {
		if i >= n {
			_, errs[i] = e.s.DeclareDeadNodes(e.ctx, 10*time.Millisecond, "")
			return
		}
		_, errs[i] = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: list[i].ID, Operation: dels[i], Now: now})
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
	_, err := e.s.DeclareDeadNodes(e.ctx, 10*time.Millisecond, "")
	must(t, err)
	for i, sb := range list {
		if got := e.getSandbox(sb.ID); got.State != model.StateDeleted {
			t.Fatalf("sandbox %d after its node's loss and its delete: %s", i, got.State)
		}
		if op := e.getOp(dels[i]); op.State != model.OpSucceeded {
			t.Fatalf("delete %d: %+v", i, op)
		}
	}
	if ops := mustUnfinished(e); len(ops) != 0 {
		t.Fatalf("unfinished operations left: %+v", ops)
	}
}
