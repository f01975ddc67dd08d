package store

import (
	"context"
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// ErrSnapshotNotReady: the snapshot exists but cannot be used (it is being
// made, failed or is being deleted).
var ErrSnapshotNotReady = errors.New("snapshot is not ready")

// SnapshotCursor is a position in the (created_at, id) order of snapshots.
type SnapshotCursor struct {
	CreatedAt time.Time
	ID        model.SnapshotID
}

// SnapshotQuery selects one project's snapshots (forks' are not listed).
type SnapshotQuery struct {
	ProjectID model.ProjectID
	Name      model.SnapshotName // "" for any; else only those of that name
	Limit     int                // 1..1000
	After     *SnapshotCursor    // exclusive; nil starts at the beginning
}

// SnapshotPage is one page of a snapshot listing, oldest first.
type SnapshotPage struct {
	Snapshots []model.SnapshotRecord
	Next      *SnapshotCursor // nil on the last page
}

// SnapshotRequest is a snapshot of a running sandbox as its request
// stores it: the record (creating) and its snapshot operation, inserted
// with the sandbox's move to snapshotting in one transaction.
type SnapshotRequest struct {
	Request  OperationRequest // its Operation is the snapshot's, kind snapshot
	Snapshot model.SnapshotRecord
	Egress   policy.Spec // the source's, for the sandboxes made from it
}

// Snapshots is the store's part of saved snapshots (the snapshot noun).
type Snapshots interface {
	// RequestSnapshot stores a snapshot request: as RequestOperation
	// (ErrBusy, model.ErrInvalidTransition, ErrNotFound for another
	// project's sandbox) plus the snapshot record, atomically.
	RequestSnapshot(ctx context.Context, req SnapshotRequest) (model.Sandbox, error)
	// GetSnapshot returns a snapshot of the project (ErrNotFound for
	// another project's, as for one that does not exist).
	GetSnapshot(ctx context.Context, project model.ProjectID, id model.SnapshotID) (model.SnapshotRecord, error)
	// GetSnapshotByID is GetSnapshot for the control loops.
	GetSnapshotByID(ctx context.Context, id model.SnapshotID) (model.SnapshotRecord, error)
	// GetSnapshotEgress returns the egress policy sandboxes made from the
	// snapshot get.
	GetSnapshotEgress(ctx context.Context, id model.SnapshotID) (policy.Spec, error)
	// SnapshotOfOperation returns the snapshot its snapshot operation
	// writes.
	SnapshotOfOperation(ctx context.Context, op model.OperationID) (model.SnapshotRecord, error)
	// ListSnapshots lists a project's snapshots but forks', oldest first.
	ListSnapshots(ctx context.Context, q SnapshotQuery) (SnapshotPage, error)
	// ListSnapshotsOnNode lists every snapshot whose files are on node.
	ListSnapshotsOnNode(ctx context.Context, node model.NodeID) ([]model.SnapshotRecord, error)
	// FinishSnapshot moves a creating snapshot to ready with what the
	// runtime wrote (ErrStateChanged if it is not creating any more);
	// written.Storage SnapshotSaving marks it to be pushed to the blob
	// store.
	FinishSnapshot(ctx context.Context, id model.SnapshotID, written model.SnapshotRecord, now time.Time) error
	// FailSnapshot moves a creating snapshot to failed with why.
	FailSnapshot(ctx context.Context, id model.SnapshotID, reason string, now time.Time) error
	// RequestSnapshotDelete moves a ready or failed snapshot of the
	// project to deleting (ErrNotFound for another project's; ErrBusy
	// while it is being made). Deleting a deleting one is a no-op.
	RequestSnapshotDelete(ctx context.Context, project model.ProjectID, id model.SnapshotID, now time.Time) (model.SnapshotRecord, error)
	// SnapshotInUse reports whether a sandbox is being created from the
	// snapshot (pending or creating): its files must stay until then.
	SnapshotInUse(ctx context.Context, id model.SnapshotID) (bool, error)
	// RemoveSnapshotRecord removes a deleting snapshot's record, once its
	// node removed its files (ErrStateChanged if it is not deleting).
	RemoveSnapshotRecord(ctx context.Context, id model.SnapshotID) error
	SnapshotBlobs
}

// SnapshotBlobs is the store's part of keeping saved snapshots in the
// shared blob store (025_snapblob.sql). A blob is content addressed and
// may be held by several snapshots: each holder claims it before pushing
// it, and a blob is deleted only once no snapshot claims it. Claims and
// deletions of one digest are serialized by a lock row per digest, so a
// push never claims a blob that a deletion is removing.
type SnapshotBlobs interface {
	// ClaimSnapshotBlobs records that the snapshot (ready and saving)
	// holds exactly these blobs, replacing an earlier claim of its own.
	// ErrBusy: one of them is being deleted (retry once it is gone);
	// ErrStateChanged: the snapshot is not ready and saving.
	ClaimSnapshotBlobs(ctx context.Context, id model.SnapshotID, digests []model.BlobDigest) error
	// MarkSnapshotStored moves a ready, saving snapshot to stored with its
	// manifest's digest, which it must have claimed (ErrStateChanged if it
	// is not saving any more).
	MarkSnapshotStored(ctx context.Context, id model.SnapshotID, manifest model.BlobDigest, now time.Time) error
	// ReleaseSnapshotBlobs drops every claim of a deleting (or removed)
	// snapshot and returns the blobs no snapshot claims any more, now
	// marked being deleted: the caller deletes them from the blob store,
	// then ForgetDeletedBlobs.
	ReleaseSnapshotBlobs(ctx context.Context, id model.SnapshotID) ([]model.BlobDigest, error)
	// BlobsBeingDeleted lists the blobs marked being deleted (a deletion
	// that a crash cut short leaves them).
	BlobsBeingDeleted(ctx context.Context) ([]model.BlobDigest, error)
	// ForgetDeletedBlobs removes the marks of blobs deleted from the blob
	// store; they may be claimed again.
	ForgetDeletedBlobs(ctx context.Context, digests []model.BlobDigest) error
}
