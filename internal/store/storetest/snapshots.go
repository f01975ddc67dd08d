package storetest

import (
	"errors"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func snapshotTests() []namedTest {
	return []namedTest{
		{"SnapshotLifecycle", testSnapshotLifecycle},
		{"SnapshotProjectScoped", testSnapshotProjectScoped},
		{"SnapshotRequestRefusedLeavesNothing", testSnapshotRequestRefused},
		{"CreateSandboxesFromSnapshotQuotaAllOrNone", testCreateSandboxesQuota},
		{"SnapshotListPagesAndHidesForks", testSnapshotListPages},
		{"SnapshotNamesListedAndFiltered", testSnapshotNames},
	}
}

// runningSandbox creates a sandbox and takes it to running on the home
// node.
func (e *env) runningSandbox(p model.ProjectID, tpl model.TemplateDigest) model.Sandbox {
	e.t.Helper()
	sb, _ := e.sandbox(p, tpl, nil)
	return e.run(sb, e.homeNode())
}

// requestSnapshot stores a snapshot request of sb.
func (e *env) requestSnapshot(sb model.Sandbox, fork bool) (model.SnapshotRecord, model.Operation, error) {
	now := e.now()
	op := model.Operation{ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID, Kind: model.OpSnapshot,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	snap := model.SnapshotRecord{ID: model.NewSnapshotID(), ProjectID: sb.ProjectID, Source: sb.ID, State: model.SnapshotCreating,
		Env: model.Env{"A": "1"}, Operation: op.ID, Fork: fork, CreatedAt: now}
	egress := policy.Spec{Default: policy.Default("none")}
	_, err := e.s.RequestSnapshot(e.ctx, store.SnapshotRequest{
		Request:  store.OperationRequest{ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: now},
		Snapshot: snap, Egress: egress,
	})
	return snap, op, err
}

func (e *env) readySnapshot(sb model.Sandbox, fork bool) model.SnapshotRecord {
	e.t.Helper()
	snap, op, err := e.requestSnapshot(sb, fork)
	must(e.t, err)
	got := e.readySnapshotOf(snap.ID)
	e.finishSnapshotOp(sb, op)
	return got
}

// finishSnapshotOp runs a snapshot operation to its end as the
// controller does: claimed, and the sandbox running again.
func (e *env) finishSnapshotOp(sb model.Sandbox, op model.Operation) {
	e.t.Helper()
	claimed := e.claim(sb.NodeID, e.now())
	if claimed.ID != op.ID {
		e.t.Fatalf("claimed %+v, want the snapshot operation %s", claimed, op.ID)
	}
	must(e.t, e.finish(store.Finish{OperationID: op.ID, Owner: sb.NodeID, State: model.OpSucceeded,
		SandboxFrom: model.StateSnapshotting, SandboxTo: model.StateRunning, Now: e.now()}))
	if got := e.getSandbox(sb.ID); got.State != model.StateRunning {
		e.t.Fatalf("sandbox after its snapshot: %s", got.State)
	}
}

// fromSnapshot builds n pending sandboxes made from snap.
func (e *env) fromSnapshot(snap model.SnapshotRecord, n int) ([]model.Sandbox, []model.Operation) {
	var sbs []model.Sandbox
	var ops []model.Operation
	for range n {
		sb, op := e.newSandbox(snap.ProjectID, snap.Template, nil)
		sb.FromSnapshot = snap.ID
		sbs, ops = append(sbs, sb), append(ops, op)
	}
	return sbs, ops
}

func testSnapshotLifecycle(e *env) {
	p := e.project()
	tpl := e.template()
	sb := e.runningSandbox(p.ID, tpl.Digest)
	sb2 := e.runningSandbox(p.ID, tpl.Digest) // for the failed one, below
	snap, op, err := e.requestSnapshot(sb, false)
	must(e.t, err)
	if got := e.getSandbox(sb.ID); got.State != model.StateSnapshotting {
		e.t.Fatalf("sandbox after the snapshot request: %s, want snapshotting", got.State)
	}
	got, err := e.s.SnapshotOfOperation(e.ctx, op.ID)
	must(e.t, err)
	if got.ID != snap.ID || got.State != model.SnapshotCreating || got.NodeID != sb.NodeID || got.Runtime != "runc" ||
		got.Template != tpl.Digest || got.Resources.DiskMiB != sb.Resources.DiskMiB || got.Env["A"] != "1" || got.Source != sb.ID {
		e.t.Fatalf("snapshot record %+v does not carry its source's spec (%+v)", got, sb)
	}
	if eg, err := e.s.GetSnapshotEgress(e.ctx, snap.ID); err != nil || eg.Default != "none" {
		e.t.Fatalf("snapshot egress %+v, %v", eg, err)
	}
	// Not ready: no sandbox starts from it, and it cannot be deleted.
	sbs, ops := e.fromSnapshot(got, 1)
	if err := e.s.CreateSandboxes(e.ctx, sbs, policy.Spec{}, ops, nil); !errors.Is(err, store.ErrSnapshotNotReady) {
		e.t.Fatalf("create from a creating snapshot: %v, want ErrSnapshotNotReady", err)
	}
	if _, err := e.s.RequestSnapshotDelete(e.ctx, p.ID, snap.ID, e.now()); !errors.Is(err, store.ErrBusy) {
		e.t.Fatalf("delete of a creating snapshot: %v, want ErrBusy", err)
	}
	ready := e.readySnapshotOf(snap.ID)
	e.finishSnapshotOp(sb, op)
	if ready.State != model.SnapshotReady || ready.Kind != model.SnapshotMemory || ready.SizeBytes != 42 || ready.Location == "" {
		e.t.Fatalf("ready snapshot %+v", ready)
	}
	if err := e.s.FinishSnapshot(e.ctx, snap.ID, ready, e.now()); !errors.Is(err, store.ErrStateChanged) {
		e.t.Fatalf("finishing a ready snapshot again: %v, want ErrStateChanged", err)
	}
	sbs, ops = e.fromSnapshot(ready, 2)
	must(e.t, e.s.CreateSandboxes(e.ctx, sbs, policy.Spec{}, ops, nil))
	if made := e.getSandbox(sbs[1].ID); made.FromSnapshot != snap.ID || made.State != model.StatePending {
		e.t.Fatalf("sandbox from a snapshot: %+v", made)
	}
	if used, err := e.s.SnapshotInUse(e.ctx, snap.ID); err != nil || !used {
		e.t.Fatalf("SnapshotInUse with two pending sandboxes = %v, %v", used, err)
	}
	del, err := e.s.RequestSnapshotDelete(e.ctx, p.ID, snap.ID, e.now())
	if err != nil || del.State != model.SnapshotDeleting {
		e.t.Fatalf("delete: %+v, %v", del, err)
	}
	if _, err := e.s.RequestSnapshotDelete(e.ctx, p.ID, snap.ID, e.now()); err != nil {
		e.t.Fatalf("deleting a deleting snapshot again: %v", err)
	}
	sbs, ops = e.fromSnapshot(ready, 1)
	if err := e.s.CreateSandboxes(e.ctx, sbs, policy.Spec{}, ops, nil); !errors.Is(err, store.ErrSnapshotNotReady) {
		e.t.Fatalf("create from a deleting snapshot: %v", err)
	}
	onNode, err := e.s.ListSnapshotsOnNode(e.ctx, sb.NodeID)
	if err != nil || len(onNode) != 1 || onNode[0].ID != snap.ID {
		e.t.Fatalf("ListSnapshotsOnNode = %+v, %v", onNode, err)
	}
	must(e.t, e.s.RemoveSnapshotRecord(e.ctx, snap.ID))
	if _, err := e.s.GetSnapshotByID(e.ctx, snap.ID); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("a removed snapshot: %v", err)
	}
	must(e.t, e.s.RemoveSnapshotRecord(e.ctx, snap.ID)) // gone already: no-op

	// A failed one.
	snap2, _, err := e.requestSnapshot(sb2, false)
	must(e.t, err)
	must(e.t, e.s.FailSnapshot(e.ctx, snap2.ID, "it broke", e.now()))
	if got, _ := e.s.GetSnapshotByID(e.ctx, snap2.ID); got.State != model.SnapshotFailed || got.Error != "it broke" {
		e.t.Fatalf("failed snapshot %+v", got)
	}
	if err := e.s.RemoveSnapshotRecord(e.ctx, snap2.ID); !errors.Is(err, store.ErrStateChanged) {
		e.t.Fatalf("removing a failed (not deleting) snapshot's record: %v", err)
	}
}

func (e *env) readySnapshotOf(id model.SnapshotID) model.SnapshotRecord {
	e.t.Helper()
	must(e.t, e.s.FinishSnapshot(e.ctx, id, model.SnapshotRecord{Kind: model.SnapshotMemory, Format: "f/1", Location: "/x/" + id.String(), SizeBytes: 42}, e.now()))
	got, err := e.s.GetSnapshotByID(e.ctx, id)
	must(e.t, err)
	return got
}

// Another project's snapshot is not found, whatever is asked of it.
func testSnapshotProjectScoped(e *env) {
	a, b := e.project(), e.project()
	tpl := e.template()
	snap := e.readySnapshot(e.runningSandbox(a.ID, tpl.Digest), false)
	if _, err := e.s.GetSnapshot(e.ctx, b.ID, snap.ID); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetSnapshot from another project: %v, want ErrNotFound", err)
	}
	if _, err := e.s.RequestSnapshotDelete(e.ctx, b.ID, snap.ID, e.now()); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("delete from another project: %v, want ErrNotFound", err)
	}
	sb, op := e.newSandbox(b.ID, tpl.Digest, nil)
	sb.FromSnapshot = snap.ID
	if err := e.s.CreateSandboxes(e.ctx, []model.Sandbox{sb}, policy.Spec{}, []model.Operation{op}, nil); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("create from another project's snapshot: %v, want ErrNotFound", err)
	}
	if got, err := e.s.GetSnapshot(e.ctx, a.ID, snap.ID); err != nil || got.State != model.SnapshotReady {
		e.t.Fatalf("the owner's snapshot after the attempts: %+v, %v", got, err)
	}
	page, err := e.s.ListSnapshots(e.ctx, store.SnapshotQuery{ProjectID: b.ID, Limit: 10})
	if err != nil || len(page.Snapshots) != 0 {
		e.t.Fatalf("another project's list: %+v, %v", page, err)
	}
}

// A snapshot request of a sandbox that is not running, or busy, writes
// nothing.
func testSnapshotRequestRefused(e *env) {
	p := e.project()
	tpl := e.template()
	sb := e.runningSandbox(p.ID, tpl.Digest)
	pending, _ := e.sandbox(p.ID, tpl.Digest, nil)
	snap, _, err := e.requestSnapshot(pending, false)
	if !errors.Is(err, model.ErrInvalidTransition) {
		e.t.Fatalf("snapshot of a pending sandbox: %v, want ErrInvalidTransition", err)
	}
	if _, err := e.s.GetSnapshotByID(e.ctx, snap.ID); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("a refused snapshot request left its record: %v", err)
	}
	_, _, err = e.requestSnapshot(sb, false)
	must(e.t, err)
	snap2, _, err := e.requestSnapshot(sb, false)
	if !errors.Is(err, model.ErrInvalidTransition) {
		e.t.Fatalf("a second snapshot while one is under way: %v", err)
	}
	if _, err := e.s.GetSnapshotByID(e.ctx, snap2.ID); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("a refused snapshot request left its record: %v", err)
	}
}

// A quota that does not admit all of a fork's sandboxes admits none.
func testCreateSandboxesQuota(e *env) {
	p := e.project()
	tpl := e.template()
	snap := e.readySnapshot(e.runningSandbox(p.ID, tpl.Digest), true)
	e.setQuota(p.ID, i64(3), nil, nil, nil)
	sbs, ops := e.fromSnapshot(snap, 3)
	err := e.s.CreateSandboxes(e.ctx, sbs, policy.Spec{}, ops, nil)
	quotaExceeded(e, err, "sandboxes")
	for _, sb := range sbs {
		if _, err := e.s.GetSandboxByID(e.ctx, sb.ID); !errors.Is(err, store.ErrNotFound) {
			e.t.Fatalf("a refused fork left sandbox %s: %v", sb.ID, err)
		}
	}
	sbs, ops = e.fromSnapshot(snap, 2)
	must(e.t, e.s.CreateSandboxes(e.ctx, sbs, policy.Spec{}, ops, nil))
	if u := e.usage(p.ID); u.Sandboxes != 3 {
		e.t.Fatalf("usage after a fork of two: %+v", u)
	}
}

// Snapshots are listed oldest first, a page at a time; forks' are not.
func testSnapshotListPages(e *env) {
	p := e.project()
	tpl := e.template()
	sb := e.runningSandbox(p.ID, tpl.Digest)
	var want []model.SnapshotID
	for i := range 3 {
		s := e.readySnapshot(sb, false)
		want = append(want, s.ID)
		if i == 1 {
			e.readySnapshot(sb, true)
		}
	}
	var got []model.SnapshotID
	q := store.SnapshotQuery{ProjectID: p.ID, Limit: 2}
	for {
		page, err := e.s.ListSnapshots(e.ctx, q)
		must(e.t, err)
		for _, s := range page.Snapshots {
			got = append(got, s.ID)
		}
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	if len(got) != len(want) {
		e.t.Fatalf("listed %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			e.t.Fatalf("listed %v, want %v", got, want)
		}
	}
	if _, err := e.s.ListSnapshots(e.ctx, store.SnapshotQuery{ProjectID: p.ID, Limit: 0}); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("limit 0: %v", err)
	}
}

// testSnapshotNames: a snapshot's name is kept; a listing filtered by
// name shows the project's snapshots of that name (two may share it),
// never another project's nor those without it.
func testSnapshotNames(e *env) {
	p, other := e.project(), e.project()
	tpl := e.template()
	sb := e.runningSandbox(p.ID, tpl.Digest)
	osb := e.runningSandbox(other.ID, tpl.Digest)
	named := func(sb model.Sandbox, name model.SnapshotName) model.SnapshotID {
		e.t.Helper()
		now := e.now()
		op := model.Operation{ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID, Kind: model.OpSnapshot,
			State: model.OpPending, CreatedAt: now, UpdatedAt: now}
		snap := model.SnapshotRecord{ID: model.NewSnapshotID(), ProjectID: sb.ProjectID, Name: name, Source: sb.ID,
			State: model.SnapshotCreating, Env: model.Env{}, Operation: op.ID, CreatedAt: now}
		_, err := e.s.RequestSnapshot(e.ctx, store.SnapshotRequest{
			Request:  store.OperationRequest{ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: now},
			Snapshot: snap, Egress: policy.Spec{Default: policy.Default("none")},
		})
		must(e.t, err)
		e.finishSnapshotOp(sb, op)
		return snap.ID
	}
	a1 := named(sb, "alpha")
	named(sb, "")
	a2 := named(sb, "alpha")
	named(sb, "beta")
	named(osb, "alpha")
	got, err := e.s.GetSnapshot(e.ctx, p.ID, a1)
	must(e.t, err)
	if got.Name != "alpha" {
		e.t.Fatalf("name = %q, want alpha", got.Name)
	}
	page, err := e.s.ListSnapshots(e.ctx, store.SnapshotQuery{ProjectID: p.ID, Name: "alpha", Limit: 10})
	must(e.t, err)
	if len(page.Snapshots) != 2 || page.Snapshots[0].ID != a1 || page.Snapshots[1].ID != a2 {
		e.t.Fatalf("listed by name: %+v, want %s and %s", page.Snapshots, a1, a2)
	}
	page, err = e.s.ListSnapshots(e.ctx, store.SnapshotQuery{ProjectID: p.ID, Name: "gamma", Limit: 10})
	must(e.t, err)
	if len(page.Snapshots) != 0 {
		e.t.Fatalf("listed by an unknown name: %+v", page.Snapshots)
	}
	page, err = e.s.ListSnapshots(e.ctx, store.SnapshotQuery{ProjectID: p.ID, Limit: 10})
	must(e.t, err)
	if len(page.Snapshots) != 4 {
		e.t.Fatalf("listed %d snapshots, want 4", len(page.Snapshots))
	}
}
