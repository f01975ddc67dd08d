package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Saved snapshots (the snapshot noun, and forks): the runtime writes each
// into a directory of its own below Config.SnapshotDir, named by the
// snapshot's ID, and new sandboxes are created from it (Ensure of a
// sandbox with FromSnapshot).

// snapshotDir is where the snapshot id's files are on this node.
func (w *Worker) snapshotDir(id model.SnapshotID) (string, error) {
	if w.cfg.SnapshotDir == "" {
		return "", fmt.Errorf("%w: this worker has no snapshot directory", ErrPermanent)
	}
	if _, err := model.ParseSnapshotID(id.String()); err != nil {
		return "", fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	return filepath.Join(w.cfg.SnapshotDir, id.String()), nil
}

// LiveSnapshot writes a snapshot of the running sandbox sb into the
// snapshot id's directory, leaving it running, and returns what was
// written. A snapshot already complete there is returned again. A
// runtime without runtime.CapLiveSnapshot fails permanently.
func (w *Worker) LiveSnapshot(ctx context.Context, sb model.Sandbox, id model.SnapshotID) (model.SnapshotRecord, error) {
	ls, err := runtime.AsLiveSnapshotter(w.cfg.Runtime)
	if err != nil {
		return model.SnapshotRecord{}, capability(err)
	}
	dir, err := w.snapshotDir(id)
	if err != nil {
		return model.SnapshotRecord{}, err
	}
	if err := os.MkdirAll(w.cfg.SnapshotDir, 0o700); err != nil {
		return model.SnapshotRecord{}, err
	}
	memory := runtime.SnapshotKindOf(w.cfg.Runtime.Info().Capabilities) == model.SnapshotMemory
	if memory {
		// Its agent lets go of its connections for the checkpoint: the
		// next call dials again, once it answers (below).
		w.dropAgent(sb.ID)
	}
	w.cfg.Fault("snapshot.before-runtime")
	var snap runtime.Snapshot
	err = w.traceRuntime(ctx, "snapshot", sb.ID, func(ctx context.Context) (err error) {
		snap, err = ls.SnapshotRunning(ctx, sb.ID, dir)
		return err
	})
	if w.rtErr("snapshot", err) != nil {
		return model.SnapshotRecord{}, fmt.Errorf("snapshot of sandbox %s: %w", sb.ID, capability(err))
	}
	w.cfg.Fault("snapshot.after-runtime")
	if memory {
		// Running again only once its agent listens again.
		if err := w.waitAgent(ctx, sb.ID); err != nil {
			return model.SnapshotRecord{}, err
		}
	}
	return model.SnapshotRecord{Kind: snap.Kind, Format: snap.Format, Location: snap.Location, SizeBytes: snap.SizeBytes}, nil
}

// RemoveSnapshot removes the files of snapshot id from this node (also a
// half-written one's). Removing an absent one succeeds.
func (w *Worker) RemoveSnapshot(ctx context.Context, id model.SnapshotID) error {
	dir, err := w.snapshotDir(id)
	if err != nil {
		return err
	}
	return w.removeSnapshotDir(ctx, dir)
}

func (w *Worker) removeSnapshotDir(ctx context.Context, dir string) error {
	if ls, err := runtime.AsLiveSnapshotter(w.cfg.Runtime); err == nil {
		return ls.RemoveSnapshot(ctx, dir)
	}
	// A runtime that cannot snapshot wrote none; a leftover goes anyway.
	return errors.Join(os.RemoveAll(dir), os.RemoveAll(dir+runtime.SnapshotTempSuffix))
}

// ListSnapshots lists the snapshots whose files (complete or half
// written) are in this worker's snapshot directory. A reconciler lists
// them before it reads the records, so that a snapshot being written is
// always named by a record it reads.
func (w *Worker) ListSnapshots(ctx context.Context) ([]model.SnapshotID, error) {
	if w.cfg.SnapshotDir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(w.cfg.SnapshotDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []model.SnapshotID
	seen := map[model.SnapshotID]bool{}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), pullSuffix) {
			continue // a pull under way (localSnapshot)
		}
		id, err := model.ParseSnapshotID(strings.TrimSuffix(e.Name(), runtime.SnapshotTempSuffix))
		if err != nil {
			w.log.WarnContext(ctx, "not a snapshot; left alone", "path", filepath.Join(w.cfg.SnapshotDir, e.Name()))
			continue
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// from returns the runtime snapshot a sandbox with FromSnapshot is created
// from: its record must be ready, on this node's environment.
func (w *Worker) from(ctx context.Context, sb model.Sandbox) (*runtime.Snapshot, error) {
	if w.cfg.LookupSnapshot == nil {
		return nil, fmt.Errorf("%w: sandbox %s is made from snapshot %s, and this worker cannot look snapshots up", ErrPermanent, sb.ID, sb.FromSnapshot)
	}
	rec, err := w.cfg.LookupSnapshot(ctx, sb.FromSnapshot)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", sb.FromSnapshot, err)
	}
	switch {
	case rec.State != model.SnapshotReady && rec.State != model.SnapshotDeleting:
		return nil, fmt.Errorf("%w: snapshot %s is %s", ErrPermanent, rec.ID, rec.State)
	case rec.Environment != "" && w.cfg.Environment != "" && rec.Environment != w.cfg.Environment:
		return nil, fmt.Errorf("%w: snapshot %s was taken in environment %s, and this worker runs %s", ErrPermanent, rec.ID, rec.Environment.Short(), w.cfg.Environment.Short())
	}
	dir, err := w.localSnapshot(ctx, rec)
	if err != nil {
		return nil, err
	}
	return &runtime.Snapshot{Kind: rec.Kind, Format: rec.Format, Location: dir, SizeBytes: rec.SizeBytes, CreatedAt: rec.CreatedAt}, nil
}
