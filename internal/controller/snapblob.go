package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/worker"
)

// Saved snapshots in the shared blob store. A snapshot made on a worker
// that can store snapshots is finished ready and saving; the push loop
// pushes its files (claiming its blobs first) and marks it stored, so
// that any node can pull it. A deleted one's blobs go once no other
// snapshot claims them. Pushes and blob deletions of this node run one at
// a time (blobMu), so that this node never deletes a blob while it pushes
// a snapshot that claims it; across nodes the store's claims keep them
// apart. A crash at any step leaves a state the next pass finishes: a
// snapshot still saving is pushed again (its blobs already there are
// reused), blobs marked being deleted are deleted again, a half-pulled
// directory is removed when the worker starts.

// kickPush wakes the push loop.
func (c *Controller) kickPush() {
	select {
	case c.pushKick <- struct{}{}:
	default:
	}
}

// pushLoop pushes this node's saving snapshots when kicked and every
// Resync period (retrying those that failed), until ctx ends. The resync
// loop's blob deletions do not wait for a push: they try again at its next
// pass.
func (c *Controller) pushLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.Resync)
	defer t.Stop()
	for {
		c.pushSaving(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.pushKick:
		}
	}
}

// pushSaving pushes every saving snapshot of this node.
func (c *Controller) pushSaving(ctx context.Context) {
	recs, err := c.cfg.Store.ListSnapshotsOnNode(ctx, c.cfg.NodeID)
	if err != nil {
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "list snapshots to push", "err", err)
		}
		return
	}
	for _, rec := range recs {
		if rec.State != model.SnapshotReady || rec.Storage != model.SnapshotSaving {
			continue
		}
		if err := c.pushSnapshot(ctx, rec); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "push a snapshot to the blob store; retried", "snapshot", rec.ID, "err", err)
		}
	}
}

func (c *Controller) pushSnapshot(ctx context.Context, rec model.SnapshotRecord) error {
	routed, err := c.cfg.Workers.Route(model.Sandbox{ID: rec.Source, Runtime: rec.Runtime})
	if err != nil {
		return err
	}
	c.blobMu.Lock()
	defer c.blobMu.Unlock()
	claim := func(ctx context.Context, digests []model.BlobDigest) error {
		return c.cfg.Store.ClaimSnapshotBlobs(ctx, rec.ID, digests)
	}
	md, err := routed.Worker.PushSnapshot(ctx, rec.ID, claim)
	if errors.Is(err, store.ErrStateChanged) {
		return nil // deleted meanwhile: its deletion releases what it claimed
	}
	if err != nil {
		return err
	}
	if err := c.cfg.Store.MarkSnapshotStored(ctx, rec.ID, md, c.cfg.Now()); err != nil && !errors.Is(err, store.ErrStateChanged) {
		return err
	}
	return nil
}

// deleteSnapshotBlobs releases a deleting snapshot's blobs and deletes
// those no snapshot claims any more.
func (c *Controller) deleteSnapshotBlobs(ctx context.Context, w *worker.Worker, id model.SnapshotID) error {
	if !c.blobMu.TryLock() {
		return errors.New("a push is under way; retried by the next resync")
	}
	defer c.blobMu.Unlock()
	gone, err := c.cfg.Store.ReleaseSnapshotBlobs(ctx, id)
	if err != nil {
		return err
	}
	if len(gone) == 0 {
		return nil
	}
	if err := w.DeleteBlobs(ctx, gone); err != nil {
		return fmt.Errorf("%w (retried by the next resync)", err)
	}
	if err := c.cfg.Store.ForgetDeletedBlobs(ctx, gone); err != nil {
		return err
	}
	c.log.InfoContext(ctx, "snapshot blobs deleted", "snapshot", id, "blobs", len(gone))
	return nil
}

// finishBlobDeletions deletes the blobs a deletion that a crash cut short
// left marked being deleted.
func (c *Controller) finishBlobDeletions(ctx context.Context) {
	w := c.blobWorker()
	if w == nil || !c.blobMu.TryLock() {
		return // none, or a push under way: the next resync
	}
	defer c.blobMu.Unlock()
	gone, err := c.cfg.Store.BlobsBeingDeleted(ctx)
	if err != nil || len(gone) == 0 {
		return
	}
	if err := w.DeleteBlobs(ctx, gone); err != nil {
		c.log.WarnContext(ctx, "delete blobs a deletion left", "err", err)
		return
	}
	if err := c.cfg.Store.ForgetDeletedBlobs(ctx, gone); err != nil {
		c.log.WarnContext(ctx, "forget deleted blobs", "err", err)
	}
}

// keepPulled reports whether the files of snapshot id, which another
// node took, are to stay on this node: a copy pulled from the blob store
// stays while the snapshot is ready (it serves further creates here), or
// while a sandbox is being made from it.
func (c *Controller) keepPulled(ctx context.Context, id model.SnapshotID) bool {
	rec, err := c.cfg.Store.GetSnapshotByID(ctx, id)
	switch {
	case err == nil && rec.State == model.SnapshotReady:
		return true
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return true // not known now: judged at the next pass
	}
	used, err := c.cfg.Store.SnapshotInUse(ctx, id)
	return err != nil || used
}

// deleteOrphanedStored finishes the deletion of stored snapshots whose
// node is dead (it would remove their files and record, and will not):
// their blobs and record go here, once no sandbox is being made from
// them. Should the node come back, its resync removes the files no record
// wants.
func (c *Controller) deleteOrphanedStored(ctx context.Context) {
	w := c.blobWorker()
	if w == nil {
		return
	}
	nodes, err := c.cfg.Store.ListNodes(ctx)
	if err != nil {
		c.log.WarnContext(ctx, "list nodes for the snapshots of dead ones", "err", err)
		return
	}
	for _, n := range nodes {
		if n.State != model.NodeDead || n.ID == c.cfg.NodeID {
			continue
		}
		recs, err := c.cfg.Store.ListSnapshotsOnNode(ctx, n.ID)
		if err != nil {
			c.log.WarnContext(ctx, "snapshots of a dead node", "node", n.ID, "err", err)
			continue
		}
		for _, rec := range recs {
			if rec.State != model.SnapshotDeleting || rec.Storage == model.SnapshotLocal {
				continue
			}
			if used, err := c.cfg.Store.SnapshotInUse(ctx, rec.ID); err != nil || used {
				continue
			}
			if err := c.deleteSnapshotBlobs(ctx, w, rec.ID); err != nil {
				c.log.WarnContext(ctx, "delete the blobs of a dead node's snapshot", "snapshot", rec.ID, "err", err)
				continue
			}
			if err := c.cfg.Store.RemoveSnapshotRecord(ctx, rec.ID); err != nil {
				c.log.WarnContext(ctx, "remove a dead node's deleted snapshot", "snapshot", rec.ID, "err", err)
				continue
			}
			c.log.InfoContext(ctx, "deleted a snapshot of a dead node from the blob store", "snapshot", rec.ID, "node", n.ID)
		}
	}
}

// blobWorker returns a worker of this node that reaches the blob store
// (they share one), nil if none does.
func (c *Controller) blobWorker() *worker.Worker {
	for _, e := range c.cfg.Workers.Environments() {
		if e.Worker.CanStoreSnapshots() {
			return e.Worker
		}
	}
	return nil
}
