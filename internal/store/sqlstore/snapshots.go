package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

const snapshotColumns = `id, project_id, name, source_sandbox, state, error, node_id, environment, runtime, template_digest,
	cpus, memory_mib, disk_mib, host_pids, env, operation_id, fork, kind, format, location, size_bytes, blob_state, blob_manifest, created_at, updated_at`

func scanSnapshotRecord(row interface{ Scan(...any) error }) (model.SnapshotRecord, error) {
	var (
		r                                              model.SnapshotRecord
		id, project, name, source, state, node, envRef string
		digest, env, op, kind, storage, manifest       string
		fork                                           int
		created, updated                               int64
	)
	err := row.Scan(&id, &project, &name, &source, &state, &r.Error, &node, &envRef, &r.Runtime, &digest,
		&r.Resources.CPUs, &r.Resources.MemoryMiB, &r.Resources.DiskMiB, &r.Resources.HostPids, &env, &op, &fork,
		&kind, &r.Format, &r.Location, &r.SizeBytes, &storage, &manifest, &created, &updated)
	if err != nil {
		return model.SnapshotRecord{}, err
	}
	what := "stored snapshot " + id
	if r.ID, err = model.ParseSnapshotID(id); err != nil {
		return r, fmt.Errorf("%s: %w", what, err)
	}
	if r.State, err = model.ParseSnapshotState(state); err != nil {
		return r, fmt.Errorf("%s: %w", what, err)
	}
	if name != "" {
		if r.Name, err = model.ParseSnapshotName(name); err != nil {
			return r, fmt.Errorf("%s: %w", what, err)
		}
	}
	if kind != "" {
		if r.Kind, err = model.ParseSnapshotKind(kind); err != nil {
			return r, fmt.Errorf("%s: %w", what, err)
		}
	}
	if r.Storage, err = model.ParseSnapshotStorage(storage); err != nil {
		return r, fmt.Errorf("%s: %w", what, err)
	}
	if manifest != "" {
		if r.BlobManifest, err = model.ParseBlobDigest(manifest); err != nil {
			return r, fmt.Errorf("%s: %w", what, err)
		}
	}
	if envRef != "" {
		if r.Environment, err = model.ParseEnvironmentRef(envRef); err != nil {
			return r, fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := json.Unmarshal([]byte(env), &r.Env); err != nil {
		return r, fmt.Errorf("%s: env: %w", what, err)
	}
	if r.Env == nil {
		r.Env = model.Env{}
	}
	c := columns{row: "snapshot " + id}
	r.ProjectID = c.projectID("project_id", project)
	r.Source = c.sandboxID("source_sandbox", source)
	r.NodeID = c.nodeID("node_id", node)
	r.Template = c.digest("template_digest", digest)
	if c.err != nil {
		return r, c.err
	}
	r.Operation = model.OperationID(op)
	r.Fork = fork != 0
	r.CreatedAt = fromMicro(created)
	r.UpdatedAt = fromMicro(updated)
	return r, nil
}

// RequestSnapshot implements store.Store.
func (s *Store) RequestSnapshot(ctx context.Context, req store.SnapshotRequest) (model.Sandbox, error) {
	op, snap := req.Request.Operation, req.Snapshot
	lc, err := model.LifecycleOf(op.Kind)
	switch {
	case err != nil:
		return model.Sandbox{}, fmt.Errorf("request snapshot of sandbox %s: %w", req.Request.SandboxID, err)
	case op.Kind != model.OpSnapshot:
		return model.Sandbox{}, fmt.Errorf("request snapshot: %w: operation kind %s", model.ErrInvalid, op.Kind)
	case op.State != "" && op.State != model.OpPending,
		op.SandboxID != req.Request.SandboxID || op.ProjectID != req.Request.ProjectID,
		snap.Operation != op.ID || snap.ProjectID != op.ProjectID || snap.Source != op.SandboxID,
		snap.State != model.SnapshotCreating:
		return model.Sandbox{}, fmt.Errorf("request snapshot of sandbox %s: %w: the snapshot, its operation and its sandbox disagree", req.Request.SandboxID, model.ErrInvalid)
	}
	if err := req.Egress.Check(); err != nil {
		return model.Sandbox{}, fmt.Errorf("request snapshot of sandbox %s: %w", req.Request.SandboxID, err)
	}
	egressText, err := encodeSpec(req.Egress)
	if err != nil {
		return model.Sandbox{}, err
	}
	env, err := jsonMap(snap.Env)
	if err != nil {
		return model.Sandbox{}, err
	}
	var out model.Sandbox
	err = s.write(ctx, true, func(t tx) error {
		if out, err = t.requestOperation(ctx, req.Request, lc); err != nil {
			return err
		}
		_, err := t.exec(ctx, `INSERT INTO snapshots (id, project_id, name, source_sandbox, state, error, node_id, environment, runtime,
			template_digest, cpus, memory_mib, disk_mib, host_pids, env, egress, operation_id, fork, kind, format, location,
			size_bytes, created_at, updated_at) VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', '', '', 0, ?, ?)`,
			string(snap.ID), string(snap.ProjectID), string(snap.Name), string(snap.Source), string(model.SnapshotCreating),
			string(out.NodeID), string(out.Environment), out.Runtime, string(out.Template),
			out.Resources.CPUs, out.Resources.MemoryMiB, out.Resources.DiskMiB, out.Resources.HostPids,
			env, egressText, string(op.ID), boolInt(snap.Fork), micro(snap.CreatedAt), micro(snap.CreatedAt))
		if err != nil {
			return fmt.Errorf("insert snapshot: %w", s.insertErr(err))
		}
		return nil
	})
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("request snapshot of sandbox %s: %w", req.Request.SandboxID, err)
	}
	return out, nil
}

// GetSnapshot implements store.Store.
func (s *Store) GetSnapshot(ctx context.Context, project model.ProjectID, id model.SnapshotID) (model.SnapshotRecord, error) {
	r, err := scanSnapshotRecord(s.queryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ? AND project_id = ?`,
		string(id), string(project)))
	if err != nil {
		return model.SnapshotRecord{}, fmt.Errorf("get snapshot %s: %w", id, errNotFound(err))
	}
	return r, nil
}

// GetSnapshotByID implements store.Store.
func (s *Store) GetSnapshotByID(ctx context.Context, id model.SnapshotID) (model.SnapshotRecord, error) {
	r, err := scanSnapshotRecord(s.queryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, string(id)))
	if err != nil {
		return model.SnapshotRecord{}, fmt.Errorf("get snapshot %s: %w", id, errNotFound(err))
	}
	return r, nil
}

// GetSnapshotEgress implements store.Store.
func (s *Store) GetSnapshotEgress(ctx context.Context, id model.SnapshotID) (policy.Spec, error) {
	var text string
	if err := s.queryRow(ctx, `SELECT egress FROM snapshots WHERE id = ?`, string(id)).Scan(&text); err != nil {
		return policy.Spec{}, fmt.Errorf("get egress of snapshot %s: %w", id, errNotFound(err))
	}
	return decodeSpec("snapshot "+string(id), text)
}

// SnapshotOfOperation implements store.Store.
func (s *Store) SnapshotOfOperation(ctx context.Context, op model.OperationID) (model.SnapshotRecord, error) {
	r, err := scanSnapshotRecord(s.queryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE operation_id = ?`, string(op)))
	if err != nil {
		return model.SnapshotRecord{}, fmt.Errorf("snapshot of operation %s: %w", op, errNotFound(err))
	}
	return r, nil
}

// ListSnapshots implements store.Store.
func (s *Store) ListSnapshots(ctx context.Context, q store.SnapshotQuery) (store.SnapshotPage, error) {
	if q.Limit < MinListLimit || q.Limit > MaxListLimit {
		return store.SnapshotPage{}, fmt.Errorf("list snapshots: %w: limit %d must be between %d and %d",
			model.ErrInvalid, q.Limit, MinListLimit, MaxListLimit)
	}
	where, args := `project_id = ? AND fork = 0`, []any{string(q.ProjectID)}
	if q.Name != "" {
		where += ` AND name = ?`
		args = append(args, string(q.Name))
	}
	if q.After != nil {
		c := micro(q.After.CreatedAt)
		where += ` AND (created_at > ? OR (created_at = ? AND id > ?))`
		args = append(args, c, c, string(q.After.ID))
	}
	rows, err := s.query(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE `+where+` ORDER BY created_at, id LIMIT ?`,
		append(args, q.Limit+1)...)
	if err != nil {
		return store.SnapshotPage{}, fmt.Errorf("list snapshots of project %s: %w", q.ProjectID, err)
	}
	list, err := collectSnapshots(rows)
	if err != nil {
		return store.SnapshotPage{}, fmt.Errorf("list snapshots of project %s: %w", q.ProjectID, err)
	}
	page := store.SnapshotPage{Snapshots: list}
	if len(list) > q.Limit {
		page.Snapshots = list[:q.Limit]
		last := page.Snapshots[q.Limit-1]
		page.Next = &store.SnapshotCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return page, nil
}

func collectSnapshots(rows *sql.Rows) ([]model.SnapshotRecord, error) {
	defer rows.Close()
	var out []model.SnapshotRecord
	for rows.Next() {
		r, err := scanSnapshotRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListSnapshotsOnNode implements store.Store.
func (s *Store) ListSnapshotsOnNode(ctx context.Context, node model.NodeID) ([]model.SnapshotRecord, error) {
	rows, err := s.query(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE node_id = ? ORDER BY created_at, id`, string(node))
	if err != nil {
		return nil, fmt.Errorf("list snapshots on node %s: %w", node, err)
	}
	list, err := collectSnapshots(rows)
	if err != nil {
		return nil, fmt.Errorf("list snapshots on node %s: %w", node, err)
	}
	return list, nil
}

// lockSnapshotState reads a snapshot's state inside t, locking its row;
// project "" matches any project.
func (t tx) lockSnapshotState(ctx context.Context, id model.SnapshotID, project model.ProjectID, lock string) (model.SnapshotState, error) {
	query, args := `SELECT state FROM snapshots WHERE id = ?`, []any{string(id)}
	if project != "" {
		query, args = query+` AND project_id = ?`, append(args, string(project))
	}
	var state string
	if err := t.queryRow(ctx, query+" "+lock, args...).Scan(&state); err != nil {
		return "", errNotFound(err)
	}
	return model.ParseSnapshotState(state)
}

// lockReadySnapshot checks that a snapshot of the project is ready and
// share-locks it until commit (a delete waits).
func (t tx) lockReadySnapshot(ctx context.Context, project model.ProjectID, id model.SnapshotID) error {
	st, err := t.lockSnapshotState(ctx, id, project, t.s.d.TemplateUseLock)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", id, err)
	}
	if st != model.SnapshotReady {
		return fmt.Errorf("snapshot %s is %s: %w", id, st, store.ErrSnapshotNotReady)
	}
	return nil
}

// setSnapshot moves a snapshot from one state to another, with set's
// extra assignments.
func (s *Store) setSnapshot(ctx context.Context, id model.SnapshotID, from []model.SnapshotState, to model.SnapshotState, set string, args ...any) error {
	return s.write(ctx, false, func(t tx) error {
		st, err := t.lockSnapshotState(ctx, id, "", t.s.d.RowLock)
		if err != nil {
			return err
		}
		ok := false
		for _, f := range from {
			ok = ok || st == f
		}
		if !ok {
			return fmt.Errorf("%w: snapshot is %s", store.ErrStateChanged, st)
		}
		q := `UPDATE snapshots SET state = ?` + set + ` WHERE id = ?`
		res, err := t.exec(ctx, q, append(append([]any{string(to)}, args...), string(id))...)
		if err != nil {
			return err
		}
		return oneRow(res)
	})
}

// FinishSnapshot implements store.Store.
func (s *Store) FinishSnapshot(ctx context.Context, id model.SnapshotID, w model.SnapshotRecord, now time.Time) error {
	if _, err := model.ParseSnapshotKind(string(w.Kind)); err != nil {
		return fmt.Errorf("finish snapshot %s: %w", id, err)
	}
	if w.Storage != model.SnapshotLocal && w.Storage != model.SnapshotSaving {
		return fmt.Errorf("finish snapshot %s: %w: a snapshot is finished local or saving, not %s", id, model.ErrInvalid, w.Storage)
	}
	err := s.setSnapshot(ctx, id, []model.SnapshotState{model.SnapshotCreating}, model.SnapshotReady,
		`, kind = ?, format = ?, location = ?, size_bytes = ?, blob_state = ?, updated_at = ?`,
		string(w.Kind), w.Format, w.Location, w.SizeBytes, string(w.Storage), micro(now))
	if err != nil {
		return fmt.Errorf("finish snapshot %s: %w", id, err)
	}
	return nil
}

// FailSnapshot implements store.Store.
func (s *Store) FailSnapshot(ctx context.Context, id model.SnapshotID, reason string, now time.Time) error {
	err := s.setSnapshot(ctx, id, []model.SnapshotState{model.SnapshotCreating}, model.SnapshotFailed,
		`, error = ?, updated_at = ?`, reason, micro(now))
	if err != nil {
		return fmt.Errorf("fail snapshot %s: %w", id, err)
	}
	return nil
}

// RequestSnapshotDelete implements store.Store.
func (s *Store) RequestSnapshotDelete(ctx context.Context, project model.ProjectID, id model.SnapshotID, now time.Time) (model.SnapshotRecord, error) {
	var out model.SnapshotRecord
	err := s.write(ctx, true, func(t tx) error {
		st, err := t.lockSnapshotState(ctx, id, project, t.s.d.RowLock)
		if err != nil {
			return err
		}
		switch st {
		case model.SnapshotCreating:
			return fmt.Errorf("%w: the snapshot is being made", store.ErrBusy)
		case model.SnapshotReady, model.SnapshotFailed:
			if _, err := t.exec(ctx, `UPDATE snapshots SET state = ?, updated_at = ? WHERE id = ?`,
				string(model.SnapshotDeleting), micro(now), string(id)); err != nil {
				return err
			}
		}
		var node string
		if err := t.queryRow(ctx, `SELECT node_id FROM snapshots WHERE id = ?`, string(id)).Scan(&node); err != nil {
			return err
		}
		t.concerns(model.NodeID(node))
		out, err = scanSnapshotRecord(t.queryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, string(id)))
		return err
	})
	if err != nil {
		return model.SnapshotRecord{}, fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return out, nil
}

// SnapshotInUse implements store.Store.
func (s *Store) SnapshotInUse(ctx context.Context, id model.SnapshotID) (bool, error) {
	var n int
	err := s.queryRow(ctx, `SELECT COUNT(*) FROM sandboxes WHERE from_snapshot = ? AND state IN (?, ?)`,
		string(id), string(model.StatePending), string(model.StateCreating)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("sandboxes made from snapshot %s: %w", id, err)
	}
	return n > 0, nil
}

// RemoveSnapshotRecord implements store.Store.
func (s *Store) RemoveSnapshotRecord(ctx context.Context, id model.SnapshotID) error {
	err := s.write(ctx, false, func(t tx) error {
		st, err := t.lockSnapshotState(ctx, id, "", t.s.d.RowLock)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if st != model.SnapshotDeleting {
			return fmt.Errorf("%w: snapshot is %s", store.ErrStateChanged, st)
		}
		_, err = t.exec(ctx, `DELETE FROM snapshots WHERE id = ?`, string(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("remove snapshot %s: %w", id, err)
	}
	return nil
}
