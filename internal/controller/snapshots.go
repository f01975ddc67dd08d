package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/worker"
)

// forkSnapshotGrace is how long a fork's ready snapshot that no sandbox is
// being created from is kept before it is deleted: the fork request makes
// its sandboxes right after the snapshot is ready; one that crashed in
// between leaves it to this.
const forkSnapshotGrace = time.Minute

// snapshotStep runs a snapshot operation: the worker writes a live
// snapshot of the running sandbox into the operation's snapshot record's
// directory and the record becomes ready. Idempotent: a ready record is
// done; a complete snapshot on disk is reported again by the runtime.
func (c *Controller) snapshotStep(ctx context.Context, op model.Operation, w *worker.Worker, sb model.Sandbox) error {
	rec, err := c.cfg.Store.SnapshotOfOperation(ctx, op.ID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: operation %s has no snapshot record", worker.ErrPermanent, op.ID)
		}
		return err
	}
	switch rec.State {
	case model.SnapshotReady:
		return nil
	case model.SnapshotCreating:
	default:
		return fmt.Errorf("%w: snapshot %s is %s", worker.ErrPermanent, rec.ID, rec.State)
	}
	written, err := w.LiveSnapshot(ctx, sb, rec.ID)
	if err != nil {
		return err
	}
	if !rec.Fork && w.CanStoreSnapshots() {
		written.Storage = model.SnapshotSaving // pushed by the push loop (snapblob.go)
	}
	if err := c.cfg.Store.FinishSnapshot(ctx, rec.ID, written, c.cfg.Now()); err != nil {
		return fmt.Errorf("record snapshot %s: %w", rec.ID, err)
	}
	c.kickPush()
	return nil
}

// failSnapshot fails the snapshot record of a snapshot operation that
// failed for good and removes what it left on disk.
func (c *Controller) failSnapshot(ctx context.Context, op model.OperationID, reason string, log *slog.Logger) {
	rec, err := c.cfg.Store.SnapshotOfOperation(ctx, op)
	if err != nil {
		log.WarnContext(ctx, "snapshot of a failed operation", "err", err)
		return
	}
	if err := c.cfg.Store.FailSnapshot(ctx, rec.ID, reason, c.cfg.Now()); err != nil && !errors.Is(err, store.ErrStateChanged) {
		log.WarnContext(ctx, "fail snapshot", "snapshot", rec.ID, "err", err)
	}
	if e, err := c.cfg.Workers.Route(model.Sandbox{ID: rec.Source, Runtime: rec.Runtime}); err == nil {
		if err := e.Worker.RemoveSnapshot(ctx, rec.ID); err != nil {
			log.WarnContext(ctx, "remove the files of a failed snapshot", "snapshot", rec.ID, "err", err)
		}
	}
}

// resyncSnapshots repairs this node's saved snapshots: files that no
// record wants (a crash mid-snapshot, a record gone) are removed; a
// record still creating whose operation ended failed is failed; a failed
// record's files are removed; a deleting record's files and then the
// record are removed once no sandbox is being created from it; a fork's
// snapshot that no sandbox is being made from any more is deleted.
func (c *Controller) resyncSnapshots(ctx context.Context) error {
	// The files first: a snapshot being written now has a record that
	// the listing below reads.
	type onDisk struct {
		w   *worker.Worker
		ids []model.SnapshotID
	}
	var disks []onDisk
	for _, e := range c.cfg.Workers.Environments() {
		ids, err := e.Worker.ListSnapshots(ctx)
		if err != nil {
			return fmt.Errorf("list %s snapshots: %w", e.Name, err)
		}
		disks = append(disks, onDisk{e.Worker, ids})
	}
	recs, err := c.cfg.Store.ListSnapshotsOnNode(ctx, c.cfg.NodeID)
	if err != nil {
		return err
	}
	c.finishBlobDeletions(ctx)
	c.deleteOrphanedStored(ctx)
	keep := make(map[model.SnapshotID]bool, len(recs))
	now := c.cfg.Now()
	for _, rec := range recs {
		keep[rec.ID] = rec.State == model.SnapshotCreating || rec.State == model.SnapshotReady || rec.State == model.SnapshotDeleting
		routed, rerr := c.cfg.Workers.Route(model.Sandbox{ID: rec.Source, Runtime: rec.Runtime})
		if rerr != nil {
			keep[rec.ID] = true // another environment's: not ours to judge
			continue
		}
		w := routed.Worker
		switch rec.State {
		case model.SnapshotCreating:
			op, err := c.cfg.Store.GetOperation(ctx, rec.ProjectID, rec.Operation)
			if err == nil && op.State == model.OpFailed {
				why := "its snapshot operation failed"
				if op.Error != nil {
					why = op.Error.Message
				}
				c.log.InfoContext(ctx, "failing a snapshot whose operation failed", "snapshot", rec.ID)
				c.failSnapshot(ctx, op.ID, why, c.log)
				keep[rec.ID] = false
			}
		case model.SnapshotReady:
			if !rec.Fork || now.Sub(rec.UpdatedAt) < forkSnapshotGrace {
				continue
			}
			if used, err := c.cfg.Store.SnapshotInUse(ctx, rec.ID); err != nil || used {
				continue
			}
			if _, err := c.cfg.Store.RequestSnapshotDelete(ctx, rec.ProjectID, rec.ID, now); err != nil {
				c.log.WarnContext(ctx, "delete a fork's snapshot", "snapshot", rec.ID, "err", err)
			}
		case model.SnapshotFailed:
			if rec.Fork {
				if _, err := c.cfg.Store.RequestSnapshotDelete(ctx, rec.ProjectID, rec.ID, now); err != nil {
					c.log.WarnContext(ctx, "delete a fork's failed snapshot", "snapshot", rec.ID, "err", err)
				}
			}
		case model.SnapshotDeleting:
			if used, err := c.cfg.Store.SnapshotInUse(ctx, rec.ID); err != nil || used {
				continue
			}
			if err := w.RemoveSnapshot(ctx, rec.ID); err != nil {
				c.log.ErrorContext(ctx, "remove a deleted snapshot's files", "snapshot", rec.ID, "err", err)
				continue
			}
			keep[rec.ID] = false
			if rec.Storage != model.SnapshotLocal {
				if err := c.deleteSnapshotBlobs(ctx, w, rec.ID); err != nil {
					c.log.ErrorContext(ctx, "delete a deleted snapshot's blobs", "snapshot", rec.ID, "err", err)
					continue
				}
			}
			if err := c.cfg.Store.RemoveSnapshotRecord(ctx, rec.ID); err != nil {
				c.log.ErrorContext(ctx, "remove a deleted snapshot's record", "snapshot", rec.ID, "err", err)
				continue
			}
			c.log.InfoContext(ctx, "snapshot deleted", "snapshot", rec.ID)
		}
	}
	for _, d := range disks {
		for _, id := range d.ids {
			if _, ours := keep[id]; !ours && c.keepPulled(ctx, id) {
				continue
			}
			if keep[id] {
				continue
			}
			c.log.InfoContext(ctx, "removing snapshot files no record wants", "snapshot", id)
			if err := d.w.RemoveSnapshot(ctx, id); err != nil {
				c.log.ErrorContext(ctx, "remove snapshot files", "snapshot", id, "err", err)
			}
		}
	}
	return nil
}
