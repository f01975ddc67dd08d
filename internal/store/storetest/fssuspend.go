package storetest

import (
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func fsSuspendTests() []namedTest {
	return []namedTest{
		{"SuspendSnapshotKind", testSuspendSnapshotKind},
	}
}

// A suspend's snapshot kind (keep_memory) is stored with the operation and
// handed back by a get and by the claim, so every attempt writes that
// kind; one on another kind of operation, or an unknown kind, is refused
// and nothing is stored.
func testSuspendSnapshotKind(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()

	bad := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	for name, op := range map[string]model.Operation{
		"a pause with a snapshot kind": {Kind: model.OpPause, SnapshotKind: model.SnapshotFilesystem},
		"an unknown kind":              {Kind: model.OpSuspend, SnapshotKind: "disk"},
	} {
		op.ID, op.ProjectID, op.SandboxID, op.State, op.CreatedAt, op.UpdatedAt = model.NewOperationID(), p.ID, bad.ID, model.OpPending, e.now(), e.now()
		_, err := e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: bad.ID, Operation: op, Now: e.now()})
		if err == nil {
			t.Fatalf("%s: stored", name)
		}
		if _, gerr := e.s.GetOperation(e.ctx, p.ID, op.ID); !errors.Is(gerr, store.ErrNotFound) {
			t.Fatalf("%s: refused (%v) but the operation is there: %v", name, err, gerr)
		}
		if got := e.getSandbox(bad.ID); got.State != model.StateRunning {
			t.Fatalf("%s: refused (%v) but the sandbox moved to %s", name, err, got.State)
		}
	}

	sb := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	suspend := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: sb.ID, Kind: model.OpSuspend,
		State: model.OpPending, SnapshotKind: model.SnapshotFilesystem, CreatedAt: e.now(), UpdatedAt: e.now()}
	_, err := e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: suspend, Now: e.now()})
	must(t, err)
	if got := e.getOp(suspend).SnapshotKind; got != model.SnapshotFilesystem {
		t.Fatalf("stored suspend: snapshot kind %q, want filesystem", got)
	}
	claimed := e.claim(node, e.now().Add(time.Second))
	if claimed.ID != suspend.ID || claimed.SnapshotKind != model.SnapshotFilesystem {
		t.Fatalf("claimed %s with snapshot kind %q, want %s with filesystem", claimed.ID, claimed.SnapshotKind, suspend.ID)
	}
}
