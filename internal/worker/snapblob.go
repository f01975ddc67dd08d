package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/snapblob"
)

// Saved snapshots in the shared blob store (internal/snapblob): the node
// that took one pushes its directory; a node that lacks it pulls it into
// its own snapshot directory, under <id>.pull until complete, before a
// sandbox is created from it.

// pullSuffix names a pull under way; what a crash leaves of one is removed
// when the worker starts.
const pullSuffix = ".pull"

// CanStoreSnapshots reports whether this worker's saved snapshots may be
// kept in the blob store: it has one, and its runtime's snapshots may move
// between nodes.
func (w *Worker) CanStoreSnapshots() bool {
	return w.cfg.Blobs != nil && w.cfg.SnapshotDir != "" && runtime.LiveSnapshotsPortable(w.cfg.Runtime)
}

// PushSnapshot pushes the files of snapshot id, which must be on this
// node, to the blob store, claiming its blobs with claim first, and
// returns the digest of its manifest.
func (w *Worker) PushSnapshot(ctx context.Context, id model.SnapshotID, claim snapblob.Claim) (model.BlobDigest, error) {
	if !w.CanStoreSnapshots() {
		return "", fmt.Errorf("%w: this worker keeps no snapshots in a blob store", ErrPermanent)
	}
	dir, err := w.snapshotDir(id)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%w: snapshot %s: its files are not on this node: %w", ErrPermanent, id, err)
	}
	md, _, err := snapblob.Push(ctx, w.cfg.Blobs, dir, claim, w.log.With("snapshot", id))
	if err != nil {
		return "", err
	}
	return model.ParseBlobDigest(md.String())
}

// DeleteBlobs deletes blobs from the blob store (those already gone
// included).
func (w *Worker) DeleteBlobs(ctx context.Context, digests []model.BlobDigest) error {
	if w.cfg.Blobs == nil {
		return fmt.Errorf("%w: this worker has no blob store", ErrPermanent)
	}
	var errs []error
	for _, d := range digests {
		bd, err := blobstore.ParseDigest(string(d))
		if err != nil {
			return err
		}
		if err := w.cfg.Blobs.Delete(ctx, bd); err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete blob %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// localSnapshot returns the directory of snapshot rec on this node,
// pulling it from the blob store first if it is not here.
func (w *Worker) localSnapshot(ctx context.Context, rec model.SnapshotRecord) (string, error) {
	dir, err := w.snapshotDir(rec.ID)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if rec.Storage != model.SnapshotStored || rec.BlobManifest == "" {
		return "", fmt.Errorf("%w: snapshot %s is kept on node %s only (%s), and its files are not on this node", ErrPermanent, rec.ID, rec.NodeID, rec.Storage)
	}
	if w.cfg.Blobs == nil {
		return "", fmt.Errorf("%w: snapshot %s is in the blob store, and this node has none (--blob-store)", ErrPermanent, rec.ID)
	}
	md, err := blobstore.ParseDigest(string(rec.BlobManifest))
	if err != nil {
		return "", fmt.Errorf("%w: snapshot %s: %w", ErrPermanent, rec.ID, err)
	}
	w.pullMu.Lock()
	defer w.pullMu.Unlock()
	if _, err := os.Stat(dir); err == nil {
		return dir, nil // pulled meanwhile
	}
	if err := os.MkdirAll(w.cfg.SnapshotDir, 0o700); err != nil {
		return "", err
	}
	tmp := dir + pullSuffix
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	w.cfg.Fault("snapshot.before-pull")
	if _, err := snapblob.Pull(ctx, w.cfg.Blobs, md, tmp, w.log.With("snapshot", rec.ID)); err != nil {
		if errors.Is(err, snapblob.ErrCorrupt) || errors.Is(err, blobstore.ErrNotFound) {
			return "", fmt.Errorf("%w: snapshot %s cannot be pulled from the blob store: %w", ErrPermanent, rec.ID, err)
		}
		return "", fmt.Errorf("pull snapshot %s: %w", rec.ID, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", errors.Join(err, os.RemoveAll(tmp))
	}
	if err := atomicfile.SyncDir(w.cfg.SnapshotDir); err != nil {
		return "", err
	}
	return dir, nil
}

// removeStalePulls removes what crashed pulls left in the snapshot
// directory.
func (w *Worker) removeStalePulls() error {
	if w.cfg.SnapshotDir == "" {
		return nil
	}
	entries, err := os.ReadDir(w.cfg.SnapshotDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), pullSuffix) {
			continue
		}
		p := filepath.Join(w.cfg.SnapshotDir, e.Name())
		w.log.Info("removing a snapshot pull a crash cut short", "dir", p)
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}
