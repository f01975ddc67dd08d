package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func snapshotBlobTests() []namedTest {
	return []namedTest{
		{"SnapshotBlobsClaimStoreRelease", testSnapshotBlobsLifecycle},
		{"SnapshotBlobsSharedUntilLastRelease", testSnapshotBlobsShared},
		{"SnapshotBlobsClaimWaitsForDeletion", testSnapshotBlobsDeleting},
	}
}

// blob returns a blob digest for a name.
func blob(name string) model.BlobDigest {
	return model.BlobDigest(fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(name))))
}

// savingSnapshot is a ready snapshot of a new running sandbox, to be
// pushed to the blob store.
func (e *env) savingSnapshot(p model.ProjectID, tpl model.TemplateDigest) model.SnapshotRecord {
	e.t.Helper()
	sb := e.runningSandbox(p, tpl)
	snap, op, err := e.requestSnapshot(sb, false)
	must(e.t, err)
	must(e.t, e.s.FinishSnapshot(e.ctx, snap.ID, model.SnapshotRecord{Kind: model.SnapshotMemory, Format: "f/1",
		Location: "/x/" + snap.ID.String(), SizeBytes: 42, Storage: model.SnapshotSaving}, e.now()))
	e.finishSnapshotOp(sb, op)
	got, err := e.s.GetSnapshotByID(e.ctx, snap.ID)
	must(e.t, err)
	return got
}

func (e *env) deleteSnapshot(snap model.SnapshotRecord) {
	e.t.Helper()
	if _, err := e.s.RequestSnapshotDelete(e.ctx, snap.ProjectID, snap.ID, e.now()); err != nil {
		e.t.Fatal(err)
	}
}

// A saving snapshot claims its blobs, is stored with its manifest, and
// its deletion releases them; the marks of deleted blobs are forgotten.
func testSnapshotBlobsLifecycle(e *env) {
	p := e.project()
	tpl := e.template()
	snap := e.savingSnapshot(p.ID, tpl.Digest)
	if snap.State != model.SnapshotReady || snap.Storage != model.SnapshotSaving || snap.BlobManifest != "" {
		e.t.Fatalf("saving snapshot %+v", snap)
	}
	// A local one (no blob store) cannot claim, and a saving one cannot be
	// stored before it claims its manifest.
	local := e.readySnapshot(e.runningSandbox(p.ID, tpl.Digest), false)
	if local.Storage != model.SnapshotLocal {
		e.t.Fatalf("local snapshot storage %q", local.Storage)
	}
	if err := e.s.ClaimSnapshotBlobs(e.ctx, local.ID, []model.BlobDigest{blob("x")}); !errors.Is(err, store.ErrStateChanged) {
		e.t.Fatalf("claim by a local snapshot: %v, want ErrStateChanged", err)
	}
	if err := e.s.MarkSnapshotStored(e.ctx, snap.ID, blob("manifest"), e.now()); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("stored before claiming its manifest: %v, want ErrInvalid", err)
	}
	if err := e.s.ClaimSnapshotBlobs(e.ctx, snap.ID, []model.BlobDigest{"sha256:nothex"}); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("claim of a bad digest: %v", err)
	}
	// A retried claim replaces the first.
	must(e.t, e.s.ClaimSnapshotBlobs(e.ctx, snap.ID, []model.BlobDigest{blob("stale")}))
	held := []model.BlobDigest{blob("manifest"), blob("a"), blob("b"), blob("a")}
	must(e.t, e.s.ClaimSnapshotBlobs(e.ctx, snap.ID, held))
	must(e.t, e.s.MarkSnapshotStored(e.ctx, snap.ID, blob("manifest"), e.now()))
	got, err := e.s.GetSnapshot(e.ctx, p.ID, snap.ID)
	must(e.t, err)
	if got.Storage != model.SnapshotStored || got.BlobManifest != blob("manifest") {
		e.t.Fatalf("stored snapshot %+v", got)
	}
	if err := e.s.MarkSnapshotStored(e.ctx, snap.ID, blob("manifest"), e.now()); !errors.Is(err, store.ErrStateChanged) {
		e.t.Fatalf("stored twice: %v, want ErrStateChanged", err)
	}
	// Only a deleting snapshot releases.
	if _, err := e.s.ReleaseSnapshotBlobs(e.ctx, snap.ID); !errors.Is(err, store.ErrStateChanged) {
		e.t.Fatalf("release by a ready snapshot: %v, want ErrStateChanged", err)
	}
	e.deleteSnapshot(got)
	gone, err := e.s.ReleaseSnapshotBlobs(e.ctx, snap.ID)
	must(e.t, err)
	want := []model.BlobDigest{blob("a"), blob("b"), blob("manifest")}
	slices.Sort(want)
	if !slices.Equal(gone, want) {
		e.t.Fatalf("released %v, want %v (the stale claim was replaced)", gone, want)
	}
	being, err := e.s.BlobsBeingDeleted(e.ctx)
	must(e.t, err)
	if !slices.Equal(being, want) {
		e.t.Fatalf("being deleted %v, want %v", being, want)
	}
	// Releasing again (a crash after the first) finds nothing more.
	if again, err := e.s.ReleaseSnapshotBlobs(e.ctx, snap.ID); err != nil || len(again) != 0 {
		e.t.Fatalf("second release: %v, %v", again, err)
	}
	must(e.t, e.s.ForgetDeletedBlobs(e.ctx, being))
	if being, err := e.s.BlobsBeingDeleted(e.ctx); err != nil || len(being) != 0 {
		e.t.Fatalf("being deleted after forgetting: %v, %v", being, err)
	}
	must(e.t, e.s.RemoveSnapshotRecord(e.ctx, snap.ID))
	if again, err := e.s.ReleaseSnapshotBlobs(e.ctx, snap.ID); err != nil || len(again) != 0 {
		e.t.Fatalf("release of a removed snapshot: %v, %v", again, err)
	}
}

// A blob two snapshots hold goes only with the second.
func testSnapshotBlobsShared(e *env) {
	p := e.project()
	tpl := e.template()
	a, b := e.savingSnapshot(p.ID, tpl.Digest), e.savingSnapshot(p.ID, tpl.Digest)
	must(e.t, e.s.ClaimSnapshotBlobs(e.ctx, a.ID, []model.BlobDigest{blob("shared"), blob("only-a")}))
	must(e.t, e.s.ClaimSnapshotBlobs(e.ctx, b.ID, []model.BlobDigest{blob("shared"), blob("only-b")}))
	e.deleteSnapshot(a)
	gone, err := e.s.ReleaseSnapshotBlobs(e.ctx, a.ID)
	must(e.t, err)
	if !slices.Equal(gone, []model.BlobDigest{blob("only-a")}) {
		e.t.Fatalf("first release: %v, want only a's own blob", gone)
	}
	must(e.t, e.s.ForgetDeletedBlobs(e.ctx, gone))
	e.deleteSnapshot(b)
	gone, err = e.s.ReleaseSnapshotBlobs(e.ctx, b.ID)
	must(e.t, err)
	want := []model.BlobDigest{blob("only-b"), blob("shared")}
	slices.Sort(want)
	if !slices.Equal(gone, want) {
		e.t.Fatalf("second release: %v, want %v", gone, want)
	}
	must(e.t, e.s.ForgetDeletedBlobs(e.ctx, gone))
}

// A blob being deleted cannot be claimed until its deletion is forgotten
// (the claim would otherwise trust a blob about to vanish).
func testSnapshotBlobsDeleting(e *env) {
	p := e.project()
	tpl := e.template()
	a, b := e.savingSnapshot(p.ID, tpl.Digest), e.savingSnapshot(p.ID, tpl.Digest)
	must(e.t, e.s.ClaimSnapshotBlobs(e.ctx, a.ID, []model.BlobDigest{blob("contended")}))
	e.deleteSnapshot(a)
	gone, err := e.s.ReleaseSnapshotBlobs(e.ctx, a.ID)
	must(e.t, err)
	if err := e.s.ClaimSnapshotBlobs(e.ctx, b.ID, []model.BlobDigest{blob("fresh"), blob("contended")}); !errors.Is(err, store.ErrBusy) {
		e.t.Fatalf("claim of a blob being deleted: %v, want ErrBusy", err)
	}
	// Nothing of the refused claim was kept.
	e.deleteSnapshot(b)
	if g, err := e.s.ReleaseSnapshotBlobs(e.ctx, b.ID); err != nil || len(g) != 0 {
		e.t.Fatalf("b held %v after a refused claim (%v)", g, err)
	}
	// The deletion ends; b (another, still saving) may claim it again.
	must(e.t, e.s.ForgetDeletedBlobs(e.ctx, gone))
	c := e.savingSnapshot(p.ID, tpl.Digest)
	must(e.t, e.s.ClaimSnapshotBlobs(e.ctx, c.ID, []model.BlobDigest{blob("contended")}))
	must(e.t, e.s.MarkSnapshotStored(e.ctx, c.ID, blob("contended"), e.now()))
}
