package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Saved snapshots in the blob store (store.SnapshotBlobs). Every claim and
// every deletion of a digest first locks its snapshot_blob_locks row
// (inserting it if absent), digests in sorted order so two transactions
// never wait on each other the other way round.

// lockBlob locks digest's lock row, making it if absent, and reports
// whether the blob is being deleted.
func (t tx) lockBlob(ctx context.Context, d model.BlobDigest) (deleting bool, err error) {
	if _, err := t.exec(ctx, `INSERT INTO snapshot_blob_locks (digest, deleting) VALUES (?, 0) ON CONFLICT (digest) DO NOTHING`, string(d)); err != nil {
		return false, err
	}
	var n int
	if err := t.queryRow(ctx, `SELECT deleting FROM snapshot_blob_locks WHERE digest = ? `+t.s.d.RowLock, string(d)).Scan(&n); err != nil {
		return false, err
	}
	return n != 0, nil
}

// snapshotBlobs lists the digests the snapshot claims, sorted.
func (t tx) snapshotBlobs(ctx context.Context, id model.SnapshotID) ([]model.BlobDigest, error) {
	rows, err := t.tx.QueryContext(ctx, t.s.q(`SELECT digest FROM snapshot_blobs WHERE snapshot_id = ? ORDER BY digest`), string(id))
	if err != nil {
		return nil, err
	}
	return collectDigests(rows)
}

type digestRows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}

func collectDigests(rows digestRows) ([]model.BlobDigest, error) {
	defer rows.Close()
	var out []model.BlobDigest
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		d, err := model.ParseBlobDigest(s)
		if err != nil {
			return nil, fmt.Errorf("stored blob digest: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ClaimSnapshotBlobs implements store.Store.
func (s *Store) ClaimSnapshotBlobs(ctx context.Context, id model.SnapshotID, digests []model.BlobDigest) error {
	want := slices.Clone(digests)
	for _, d := range want {
		if _, err := model.ParseBlobDigest(string(d)); err != nil {
			return fmt.Errorf("claim blobs of snapshot %s: %w", id, err)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	err := s.write(ctx, false, func(t tx) error {
		st, err := t.lockSnapshotState(ctx, id, "", t.s.d.RowLock)
		if err != nil {
			return err
		}
		var storage string
		if err := t.queryRow(ctx, `SELECT blob_state FROM snapshots WHERE id = ?`, string(id)).Scan(&storage); err != nil {
			return err
		}
		if st != model.SnapshotReady || model.SnapshotStorage(storage) != model.SnapshotSaving {
			return fmt.Errorf("%w: snapshot is %s, %s", store.ErrStateChanged, st, model.SnapshotStorage(storage))
		}
		for _, d := range want {
			deleting, err := t.lockBlob(ctx, d)
			if err != nil {
				return err
			}
			if deleting {
				return fmt.Errorf("%w: blob %s is being deleted", store.ErrBusy, d)
			}
		}
		if _, err := t.exec(ctx, `DELETE FROM snapshot_blobs WHERE snapshot_id = ?`, string(id)); err != nil {
			return err
		}
		for _, d := range want {
			if _, err := t.exec(ctx, `INSERT INTO snapshot_blobs (snapshot_id, digest) VALUES (?, ?)`, string(id), string(d)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claim blobs of snapshot %s: %w", id, err)
	}
	return nil
}

// MarkSnapshotStored implements store.Store.
func (s *Store) MarkSnapshotStored(ctx context.Context, id model.SnapshotID, manifest model.BlobDigest, now time.Time) error {
	if _, err := model.ParseBlobDigest(string(manifest)); err != nil {
		return fmt.Errorf("mark snapshot %s stored: %w", id, err)
	}
	err := s.write(ctx, true, func(t tx) error {
		st, err := t.lockSnapshotState(ctx, id, "", t.s.d.RowLock)
		if err != nil {
			return err
		}
		var storage, node string
		if err := t.queryRow(ctx, `SELECT blob_state, node_id FROM snapshots WHERE id = ?`, string(id)).Scan(&storage, &node); err != nil {
			return err
		}
		if st != model.SnapshotReady || model.SnapshotStorage(storage) != model.SnapshotSaving {
			return fmt.Errorf("%w: snapshot is %s, %s", store.ErrStateChanged, st, model.SnapshotStorage(storage))
		}
		var n int
		if err := t.queryRow(ctx, `SELECT COUNT(*) FROM snapshot_blobs WHERE snapshot_id = ? AND digest = ?`, string(id), string(manifest)).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: the snapshot does not claim its manifest %s", model.ErrInvalid, manifest)
		}
		t.concerns(model.NodeID(node))
		_, err = t.exec(ctx, `UPDATE snapshots SET blob_state = ?, blob_manifest = ?, updated_at = ? WHERE id = ?`,
			string(model.SnapshotStored), string(manifest), micro(now), string(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("mark snapshot %s stored: %w", id, err)
	}
	return nil
}

// ReleaseSnapshotBlobs implements store.Store.
func (s *Store) ReleaseSnapshotBlobs(ctx context.Context, id model.SnapshotID) ([]model.BlobDigest, error) {
	var gone []model.BlobDigest
	err := s.write(ctx, false, func(t tx) error {
		st, err := t.lockSnapshotState(ctx, id, "", t.s.d.RowLock)
		switch {
		case err == nil && st != model.SnapshotDeleting:
			return fmt.Errorf("%w: snapshot is %s", store.ErrStateChanged, st)
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return err
		}
		held, err := t.snapshotBlobs(ctx, id)
		if err != nil {
			return err
		}
		if _, err := t.exec(ctx, `DELETE FROM snapshot_blobs WHERE snapshot_id = ?`, string(id)); err != nil {
			return err
		}
		gone = gone[:0]
		for _, d := range held {
			if _, err := t.lockBlob(ctx, d); err != nil {
				return err
			}
			var n int
			if err := t.queryRow(ctx, `SELECT COUNT(*) FROM snapshot_blobs WHERE digest = ?`, string(d)).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				continue // another snapshot holds it
			}
			if _, err := t.exec(ctx, `UPDATE snapshot_blob_locks SET deleting = 1 WHERE digest = ?`, string(d)); err != nil {
				return err
			}
			gone = append(gone, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("release blobs of snapshot %s: %w", id, err)
	}
	return gone, nil
}

// BlobsBeingDeleted implements store.Store.
func (s *Store) BlobsBeingDeleted(ctx context.Context) ([]model.BlobDigest, error) {
	rows, err := s.query(ctx, `SELECT digest FROM snapshot_blob_locks WHERE deleting = 1 ORDER BY digest`)
	if err != nil {
		return nil, fmt.Errorf("blobs being deleted: %w", err)
	}
	out, err := collectDigests(rows)
	if err != nil {
		return nil, fmt.Errorf("blobs being deleted: %w", err)
	}
	return out, nil
}

// ForgetDeletedBlobs implements store.Store.
func (s *Store) ForgetDeletedBlobs(ctx context.Context, digests []model.BlobDigest) error {
	err := s.write(ctx, false, func(t tx) error {
		for _, d := range digests {
			if _, err := t.exec(ctx, `DELETE FROM snapshot_blob_locks WHERE digest = ? AND deleting = 1`, string(d)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("forget deleted blobs: %w", err)
	}
	return nil
}
