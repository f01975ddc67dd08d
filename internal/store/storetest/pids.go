package storetest

import (
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// testNodePidsBudget: a node's pids budget bounds the sum of its live
// sandboxes' host pids, on a create placed on it and on an assignment;
// the node reports the budget and the sum, and a sandbox its host pids.
func testNodePidsBudget(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	reg := func(budget int) model.NodeID {
		return e.register(model.Node{ID: model.NewNodeID(), PidsBudget: budget}).ID
	}
	pids := func(n int) func(*model.Sandbox) { return func(sb *model.Sandbox) { sb.Resources.HostPids = n } }

	node := reg(2000)
	for i, tc := range []struct {
		pids int
		ok   bool
	}{{1088, true}, {1088, false}, {912, true}, {1, false}, {0, true}} {
		_, _, err := e.createOn(p.ID, tpl.Digest, node, pids(tc.pids))
		switch {
		case tc.ok && err != nil:
			t.Fatalf("create %d of %d host pids: %v", i, tc.pids, err)
		case !tc.ok:
			mustIs(t, err, store.ErrNodeFull)
		}
	}
	// 1088 + 912, and one charged nothing; the refused ones hold nothing.
	if n := e.getNode(node); n.PidsBudget != 2000 || n.Usage.Pids != 2000 || n.Usage.Sandboxes != 3 {
		t.Fatalf("node: budget %d, usage %+v; want 2000 of 2000 in 3 sandboxes", n.PidsBudget, n.Usage)
	}
	// No budget bounds nothing, and a sandbox's host pids are kept.
	sb, _, err := e.createOn(p.ID, tpl.Digest, reg(0), pids(1<<20))
	must(t, err)
	if got := e.getSandbox(sb.ID).Resources.HostPids; got != 1<<20 {
		t.Fatalf("stored host pids %d, want %d", got, 1<<20)
	}

	// An assignment charges the unplaced sandbox's host pids.
	tight, roomy := reg(1000), reg(1088)
	c, _, err := e.createOn(p.ID, tpl.Digest, "", pids(1088))
	must(t, err)
	mustIs(t, e.s.AssignNode(e.ctx, c.ID, tight), store.ErrNodeFull)
	if got := e.getSandbox(c.ID); got.NodeID != "" {
		t.Fatalf("refused assignment placed the sandbox on %s", got.NodeID)
	}
	must(t, e.s.AssignNode(e.ctx, c.ID, roomy))
	if u := e.getNode(roomy).Usage; u.Pids != 1088 {
		t.Fatalf("usage after the assignment %+v, want 1088 pids", u)
	}
}
