package sandboxes

import (
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// A create from a snapshot whose files are on its node only (saving)
// goes there, and is refused (retry) while that node takes no new
// sandboxes; a stored one goes
// to its node while it has room and is active, else to another node.
func TestCreateFromSnapshotPlacement(t *testing.T) {
	f := newFixture(t)
	s := f.service(Config{}, true)
	src, err := f.create(s, nil)
	must(t, err)
	f.run(src.Sandbox.ID)
	other := model.NewNodeID()
	_, err = f.st.RegisterNode(f.ctx, model.Node{ID: other, Incarnation: model.NewIncarnation(), Role: model.RoleAll,
		AdvertiseURL: "http://127.0.0.1:2", CanPull: true})
	must(t, err)

	// A snapshot of the source, ready on the fixture's node and saving.
	sb := f.get(src.Sandbox.ID)
	op := model.Operation{ID: model.NewOperationID(), ProjectID: f.proj, SandboxID: sb.ID, Kind: model.OpSnapshot,
		State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
	snap := model.SnapshotRecord{ID: model.NewSnapshotID(), ProjectID: f.proj, Source: sb.ID, State: model.SnapshotCreating,
		Operation: op.ID, Env: model.Env{}, CreatedAt: f.now}
	_, err = f.st.RequestSnapshot(f.ctx, store.SnapshotRequest{
		Request:  store.OperationRequest{ProjectID: f.proj, SandboxID: sb.ID, Operation: op, Now: f.now},
		Snapshot: snap, Egress: policy.Spec{Default: policy.Default("none")},
	})
	must(t, err)
	claimed, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
	must(t, err)
	must(t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: claimed.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
		SandboxFrom: model.StateSnapshotting, SandboxTo: model.StateRunning, Now: f.now}))
	must(t, f.st.FinishSnapshot(f.ctx, snap.ID, model.SnapshotRecord{Kind: model.SnapshotFilesystem, Format: "f/1", Location: "/x",
		SizeBytes: 1, Storage: model.SnapshotSaving}, f.now))

	try := func() (Created, error) {
		return f.create(s, func(r *CreateRequest) { r.Snapshot, r.Template = snap.ID, model.TemplateRef{} })
	}
	from := func() model.NodeID {
		t.Helper()
		c, err := try()
		must(t, err)
		return c.Sandbox.NodeID
	}
	if got := from(); got != f.node {
		t.Fatalf("saving snapshot: placed on %s, want its node %s", got, f.node)
	}
	_, err = f.st.SetNodeState(f.ctx, f.node, model.NodeCordoned)
	must(t, err)
	if _, err := try(); err == nil {
		t.Fatal("saving snapshot, its node cordoned: created, want a refusal (only its node has its files)")
	} else {
		wantKind(t, err, NoCapacity)
	}
	_, err = f.st.SetNodeState(f.ctx, f.node, model.NodeActive)
	must(t, err)

	manifest := model.BlobDigest("sha256:ab00000000000000000000000000000000000000000000000000000000000000")
	must(t, f.st.ClaimSnapshotBlobs(f.ctx, snap.ID, []model.BlobDigest{manifest}))
	must(t, f.st.MarkSnapshotStored(f.ctx, snap.ID, manifest, f.now))
	if got := from(); got != f.node {
		t.Fatalf("stored snapshot, its node active: placed on %s, want its node %s (nothing to pull)", got, f.node)
	}
	_, err = f.st.SetNodeState(f.ctx, f.node, model.NodeCordoned)
	must(t, err)
	if got := from(); got != other {
		t.Fatalf("stored snapshot, its node cordoned: placed on %s, want the other node %s", got, other)
	}
}
